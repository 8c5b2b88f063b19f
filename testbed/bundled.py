"""scikit-learn's bundled datasets (no download) as sources for data prep, and small models trained on them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported when a model is fitted, not when a test module imports this one
    from torch import nn


def fit_linear(x: np.ndarray, y: np.ndarray, outputs: int, loss: nn.Module, epochs: int = 300) -> nn.Module:
    """A linear model trained full-batch: enough for the bundled datasets, and quick."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    model = nn.Sequential(nn.Linear(x.shape[1], outputs))
    scaled = torch.from_numpy(((x - mean) / std).astype(np.float32))
    target = torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(epochs):
        opt.zero_grad()
        loss(model(scaled).squeeze(-1) if outputs == 1 else model(scaled), target).backward()
        opt.step()

    class Standardized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.from_numpy(mean.astype(np.float32)))
            self.register_buffer("std", torch.from_numpy(std.astype(np.float32)))
            self.linear = model[0]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear((x - self.mean) / self.std)

    return Standardized().eval()


def table_source(tmp_path, name, x, y, columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({**{c: x[:, i] for i, c in enumerate(columns)}, "target": y}), path)
    return str(path)


def prepared_breast_cancer(tmp_path) -> str:
    """scikit-learn's breast cancer data (30 features, binary) prepared as a dataset under ``tmp_path/ds``."""
    from sklearn.datasets import load_breast_cancer

    from kftrain.steps.prep import prepare_dataset

    data = load_breast_cancer()
    source = table_source(tmp_path, "bc", data.data, data.target, [f"f{i}" for i in range(30)])
    prepare_dataset(str(tmp_path / "ds"), source=source, label_column="target")
    return str(tmp_path / "ds")


def least_squares(x: np.ndarray, y: np.ndarray) -> nn.Module:
    """Ordinary least squares as a one-output linear layer: the regression baseline, solved exactly."""
    import torch
    from torch import nn

    design = np.column_stack([x, np.ones(len(x))]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(design, y.astype(np.float64), rcond=None)
    layer = nn.Linear(x.shape[1], 1)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(coef[:-1].astype(np.float32))[None, :])
        layer.bias.fill_(float(coef[-1]))
    return layer.eval()


def partitioned_parquet(root, table, by: str) -> str:
    """``table`` as hive-partitioned Parquet under ``root``: one ``<by>=<value>/part-0.parquet`` per value."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for value in sorted(set(table[by].to_pylist())):
        folder = root / f"{by}={value}"
        folder.mkdir(parents=True)
        pq.write_table(table.filter(pc.equal(table[by], value)).drop([by]), folder / "part-0.parquet")
    return str(root)


def diabetes_table():
    """scikit-learn's diabetes progression data (442 patients, a numeric target), the sex code as a string."""
    import pyarrow as pa
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    columns = {name: data.data[:, i] for i, name in enumerate(data.feature_names) if name != "sex"}
    sex = np.where(data.data[:, data.feature_names.index("sex")] == 1, "s1", "s2")
    return pa.table({**columns, "sex": sex, "progression": data.target})


def wine_table():
    """scikit-learn's wine data (178 wines, 3 cultivars as string labels), the alcohol level as a string."""
    import pyarrow as pa
    from sklearn.datasets import load_wine

    data = load_wine()
    columns = {name.replace("/", "_"): data.data[:, i] for i, name in enumerate(data.feature_names)}
    level = np.where(data.data[:, 0] > np.median(data.data[:, 0]), "high", "low")
    cultivar = np.array(["barolo", "grignolino", "barbera"])[data.target]
    return pa.table({**columns, "alcohol_level": level, "cultivar": cultivar})

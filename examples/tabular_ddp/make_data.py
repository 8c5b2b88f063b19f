"""Writes data/: scikit-learn's bundled breast cancer data (569 tumours, 30 measurements) as a user's dataset might
arrive: hive-partitioned Parquet (one folder per clinic), a string feature (the tumour's size class) and string
labels (the diagnosis). The files are committed; this script says how they were made.

    python examples/tabular_ddp/make_data.py
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sklearn.datasets import load_breast_cancer

data = load_breast_cancer()
radius = data.data[:, 0]
columns = {name.replace(" ", "_"): data.data[:, i] for i, name in enumerate(data.feature_names)}
table = pa.table(
    {
        **columns,
        "size": np.array(["small", "medium", "large"])[np.digitize(radius, np.quantile(radius, [1 / 3, 2 / 3]))],
        "diagnosis": np.array(["malignant", "benign"])[data.target],
        "clinic": np.where(np.arange(len(data.target)) % 3 == 0, "north", "south"),
    }
)
out = Path(__file__).parent / "data"
for clinic in ("north", "south"):
    folder = out / f"clinic={clinic}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = table.filter(pc.equal(table["clinic"], clinic)).drop(["clinic"])
    pq.write_table(rows, folder / "part-0.parquet", compression="zstd")
print(f"wrote {len(table)} rows under {out}")

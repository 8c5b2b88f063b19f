"""The ``builtin:`` sample datasets: scikit-learn's bundled tables (no download), as data prep reads them.

scikit-learn and the scipy it needs are about 190 MB installed, for four tables of under a megabyte, so the
data image does not carry them: its build bakes the tables as Parquet into ``$KFTRAIN_SAMPLES_DIR``
(``python -m kftrain.steps.prep.samples DIR``) and installs only ``kftrain[data,s3]``. :func:`sample_table`
reads a baked table when there is one, else builds it with scikit-learn (the ``[samples]`` extra), else fails
naming both. A baked table equals the built one: names, types and values (tests/steps/prep/test_prep_samples.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kftrain.extras import requires

with requires("data", "the builtin: sample datasets"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

from kftrain.data.dataset import DataValidationError

SAMPLES_DIR_ENV = "KFTRAIN_SAMPLES_DIR"
NAMES = ("digits", "breast_cancer", "diabetes", "wine")
LABEL = "label"


def sample_table(name: str) -> pa.Table:
    """The bundled table ``name``: its features (named as scikit-learn names them) and ``label``."""
    if name not in NAMES:
        bundled = ", ".join(f"builtin:{n}" for n in NAMES)
        raise DataValidationError(f"source builtin:{name}: unknown (bundled: {bundled})")
    baked = baked_path(name)
    return pq.read_table(baked) if baked is not None else build(name)


def baked_path(name: str) -> Path | None:
    """The Parquet file of ``name`` in ``$KFTRAIN_SAMPLES_DIR``; None when it is not set or holds none."""
    folder = os.environ.get(SAMPLES_DIR_ENV)
    path = Path(folder) / f"{name}.parquet" if folder else None
    return path if path is not None and path.is_file() else None


def build(name: str) -> pa.Table:
    """``name`` from scikit-learn's bundled copy."""
    where = f" (not baked in ${SAMPLES_DIR_ENV})" if os.environ.get(SAMPLES_DIR_ENV) else ""
    with requires("samples", f"source builtin:{name}{where}"):
        from sklearn import datasets

    if name == "digits":
        data = datasets.load_digits()
        x = (data.data / 16.0).astype(np.float32)  # pixel intensities 0..16 -> 0..1
        names = [f"pixel_{i:02d}" for i in range(x.shape[1])]
    else:
        data = getattr(datasets, f"load_{name}")()
        x, names = data.data.astype(np.float32), [str(n) for n in data.feature_names]
    columns = {n: pa.array(x[:, i], type=pa.float32()) for i, n in enumerate(names)}
    columns[LABEL] = pa.array(data.target)
    return pa.table(columns)


def bake(folder: Path) -> list[Path]:
    """Write every sample as ``<folder>/<name>.parquet`` (each file whole or not at all)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in NAMES:
        target = folder / f"{name}.parquet"
        partial = target.with_name(f".{target.name}.partial")
        pq.write_table(build(name), partial)
        partial.replace(target)
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m kftrain.steps.prep.samples DIR  (writes the builtin: samples there as Parquet)")
    for path in bake(Path(sys.argv[1])):
        print(f"{path} ({path.stat().st_size} bytes)")

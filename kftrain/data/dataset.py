"""The prepared-dataset format and its reader.

A prepared dataset (written by :mod:`kftrain.steps.prep`) is a folder published atomically with a
checksum manifest: one folder of Parquet shards per split (``train/part-00000-of-00002.parquet`` ...),
each with float32 feature columns and an int64 ``label`` column, plus ``dataset.json``
(:class:`DatasetInfo`: schema, row counts, classes, shard list). Trainers, evaluation and export read
it through :func:`read_info` and :func:`load_split`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.extras import requires

with requires("data", "reading a prepared dataset"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

SPLITS = ("train", "validation", "test")
LABEL = "label"
DATASET_INFO = "dataset.json"


class DataValidationError(KftrainError):
    """The input data cannot be used: the message says which column or row."""


@dataclass
class DatasetInfo:
    """The contents of ``dataset.json``."""

    source: str
    num_features: int
    num_classes: int
    feature_names: list[str]
    classes: list[int]
    rows: dict[str, int]
    shards: dict[str, list[str]]
    seed: int
    schema: dict[str, str] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, Any]:
        """What goes into the KFP Dataset artifact's metadata (shown in the UI)."""
        return {
            "source": self.source,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "rows": self.rows,
            "schema": self.schema,
            "format": "parquet",
            "seed": self.seed,
        }


def read_info(dataset_uri: str) -> DatasetInfo:
    """The ``dataset.json`` of the complete dataset at ``dataset_uri``."""
    return _info(storage.ArtifactReader(dataset_uri))


def _info(dataset: storage.ArtifactReader) -> DatasetInfo:
    doc = dataset.read_json(DATASET_INFO)
    try:
        return DatasetInfo(**doc)
    except TypeError as exc:  # a missing or unknown key
        raise DataValidationError(f"{dataset.uri}/{DATASET_INFO}: not a dataset description ({exc})") from None


def load_split(
    dataset_uri: str, split: str, *, shard_index: int | None = None, num_shards: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of ``split``; with ``shard_index``/``num_shards`` only every num_shards-th file."""
    dataset = storage.ArtifactReader(dataset_uri)  # one version, every shard checked against its marker
    info = _info(dataset)
    if split not in info.shards:
        raise DataValidationError(f"{dataset_uri}: no split {split!r} (have {', '.join(info.shards)})")
    files = info.shards[split]
    if shard_index is not None and num_shards:
        files = files[shard_index::num_shards]
    if not files:  # a shard index past the last file
        return np.zeros((0, info.num_features), np.float32), np.zeros(0, np.int64)
    # A shard path comes from dataset.json: the reader refuses one its marker does not list (a "../x").
    tables = [pq.read_table(pa.BufferReader(dataset.read_bytes(rel))) for rel in files]
    table = pa.concat_tables(tables)
    x = np.column_stack([table.column(n).to_numpy() for n in info.feature_names]).astype(np.float32)
    y = table.column(LABEL).to_numpy().astype(np.int64)
    return x, y

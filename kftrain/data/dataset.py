"""The prepared-dataset format and its reader.

A prepared dataset (written by :mod:`kftrain.steps.prep`) is a folder published atomically with a
checksum manifest: one folder of Parquet shards per split (``train/part-00000.parquet`` ...) plus
``dataset.json`` (:class:`DatasetInfo`: task, schema, vocabularies, statistics, row counts, classes, shard
list). A table dataset's shards hold float32 feature columns and a ``label`` column: the class id
(int64, ``0..num_classes-1``; ``classes[i]`` is the original label of id ``i``) or the regression target
(float32). A files dataset (pass-through mode) lists files instead: ``path`` (relative to ``root``), ``uri``
and, when labelled, ``label``. Trainers, evaluation and export read it through :func:`read_info`,
:func:`load_split` and :func:`iter_batches`; programs that do not import kftrain read the same files with
pyarrow (``components/data/prepare_dataset/README.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.storage.uri import is_local

SPLITS = ("train", "validation", "test")
LABEL = "label"
DATASET_INFO = "dataset.json"
CLASSIFICATION = "classification"
REGRESSION = "regression"
TABLE = "table"
FILES = "files"
BATCH_ROWS = 65536  # rows per batch when a split is streamed: memory stays bounded whatever its size


class DataValidationError(KftrainError):
    """The input data cannot be used: the message says which column or row."""


@dataclass
class DatasetInfo:
    """The contents of ``dataset.json``."""

    source: str
    num_features: int
    num_classes: int
    feature_names: list[str]
    classes: list[Any]  # classification: the original label of each class id
    rows: dict[str, int]
    shards: dict[str, list[str]]
    seed: int
    schema: dict[str, str] = field(default_factory=dict)
    kind: str = TABLE  # table: features and a label; files: a list of files a trainer reads itself
    task: str = CLASSIFICATION
    label_column: str = LABEL  # the label's name in the source
    vocabularies: dict[str, list[Any]] = field(default_factory=dict)  # categorical column -> value of each id
    statistics: dict[str, dict[str, Any]] = field(default_factory=dict)  # per source column
    missing: dict[str, Any] = field(default_factory=dict)  # the policy and what it did
    root: str = ""  # files datasets: the URI the listed paths are relative to

    def to_metadata(self, max_columns: int = 100) -> dict[str, Any]:
        """What goes into the KFP Dataset artifact's metadata (shown in the UI); wide schemas are cut short."""
        out: dict[str, Any] = {
            "source": self.source,
            "kind": self.kind,
            "task": self.task,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "rows": self.rows,
            "format": "parquet",
            "seed": self.seed,
            "missing": self.missing,
        }
        if len(self.classes) <= max_columns:
            out["classes"] = self.classes
        if len(self.schema) <= max_columns:
            out["schema"] = self.schema
            out["statistics"] = self.statistics
        else:
            out["schema"] = f"{len(self.schema)} columns: see dataset.json"
        if self.vocabularies:
            out["vocabulary_sizes"] = {k: len(v) for k, v in self.vocabularies.items()}
        if self.root:
            out["root"] = self.root
        return out


def read_info(dataset_uri: str) -> DatasetInfo:
    """The ``dataset.json`` of the complete dataset at ``dataset_uri``."""
    storage.require_complete(dataset_uri)
    return DatasetInfo(**storage.read_json(storage.join(dataset_uri, DATASET_INFO)))


def split_files(dataset_uri: str, info: DatasetInfo, split: str) -> list[str]:
    """The shard files of ``split``; an error naming the splits there are."""
    if split not in info.shards:
        raise DataValidationError(f"{dataset_uri}: no split {split!r} (have {', '.join(info.shards)})")
    return info.shards[split]


def label_dtype(info: DatasetInfo) -> Any:
    """Class ids are int64, regression targets float32."""
    return np.float32 if info.task == REGRESSION else np.int64


def iter_batches(
    dataset_uri: str, split: str, *, batch_rows: int = BATCH_ROWS, info: DatasetInfo | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(features, labels)`` of ``split`` in batches of at most ``batch_rows`` rows, one shard at a time."""
    info = info or read_info(dataset_uri)
    if info.kind != TABLE:
        raise DataValidationError(f"{dataset_uri}: a {info.kind} dataset has no feature columns to read")
    columns = [*info.feature_names, LABEL]
    for rel in split_files(dataset_uri, info, split):
        uri = storage.join(dataset_uri, rel)
        if is_local(uri):  # Arrow reads a local file itself: through a Python handle it buffers far more
            shard = pq.ParquetFile(str(storage.local_path(uri)))
            for batch in shard.iter_batches(batch_size=batch_rows, columns=columns):
                yield _arrays(batch, info)
            continue
        with storage.open_uri(uri, "rb") as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=batch_rows, columns=columns):
                yield _arrays(batch, info)


def _arrays(table: pa.Table | pa.RecordBatch, info: DatasetInfo) -> tuple[np.ndarray, np.ndarray]:
    if not info.feature_names:
        x = np.zeros((table.num_rows, 0), np.float32)
    else:
        x = np.column_stack([table.column(n).to_numpy(zero_copy_only=False) for n in info.feature_names])
    y = table.column(LABEL).to_numpy(zero_copy_only=False).astype(label_dtype(info))
    return x.astype(np.float32, copy=False), y


def load_split(
    dataset_uri: str, split: str, *, shard_index: int | None = None, num_shards: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of ``split``; with ``shard_index``/``num_shards`` only every num_shards-th file."""
    info = read_info(dataset_uri)
    files = split_files(dataset_uri, info, split)
    if shard_index is not None and num_shards:
        files = files[shard_index::num_shards]
    if not files:  # a shard index past the last file
        return np.zeros((0, info.num_features), np.float32), np.zeros(0, label_dtype(info))
    tables = []
    for rel in files:
        with storage.open_uri(storage.join(dataset_uri, rel), "rb") as handle:
            tables.append(pq.read_table(handle, columns=[*info.feature_names, LABEL]))
    return _arrays(pa.concat_tables(tables), info)

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

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.extras import requires
from kftrain.storage.uri import is_local

with requires("data", "reading a prepared dataset"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    return _info(storage.ArtifactReader(dataset_uri))


def _info(dataset: storage.ArtifactReader) -> DatasetInfo:
    doc = dataset.read_json(DATASET_INFO)
    try:
        return DatasetInfo(**doc)
    except TypeError as exc:  # a missing or unknown key
        raise DataValidationError(f"{dataset.uri}/{DATASET_INFO}: not a dataset description ({exc})") from None


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
    dataset = storage.ArtifactReader(dataset_uri)  # one version; a shard its marker does not list is refused
    info = info or _info(dataset)
    if info.kind != TABLE:
        raise DataValidationError(f"{dataset_uri}: a {info.kind} dataset has no feature columns to read")
    columns = [*info.feature_names, LABEL]
    for rel in split_files(dataset_uri, info, split):
        if is_local(dataset.root):
            # Arrow reads a local file itself (through a Python handle it buffers far more), once the file
            # has been checked against the marker by a streamed read.
            shard = pq.ParquetFile(str(storage.local_path(dataset.checked_uri(rel))))
        else:  # one shard in memory at a time (prep cuts them by bytes), checked as it is read
            shard = pq.ParquetFile(pa.BufferReader(dataset.read_bytes(rel)))
        for batch in shard.iter_batches(batch_size=batch_rows, columns=columns):
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
    dataset = storage.ArtifactReader(dataset_uri)  # one version, every shard checked against its marker
    info = _info(dataset)
    files = split_files(dataset_uri, info, split)
    if shard_index is not None and num_shards:
        files = files[shard_index::num_shards]
    if not files:  # a shard index past the last file
        return np.zeros((0, info.num_features), np.float32), np.zeros(0, label_dtype(info))
    # A shard path comes from dataset.json: the reader refuses one its marker does not list (a "../x").
    columns = [*info.feature_names, LABEL]
    tables = [pq.read_table(pa.BufferReader(dataset.read_bytes(rel)), columns=columns) for rel in files]
    return _arrays(pa.concat_tables(tables), info)

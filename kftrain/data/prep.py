"""Data prep: ingest a tabular classification dataset, validate it, split it, shard it, write Parquet.

Sources: ``builtin:digits`` (scikit-learn's bundled 8x8 digits, 1,797 images, no download) or a
Parquet/CSV file by URI with a label column. The output is one folder per split
(``train/part-00000-of-00002.parquet`` ...) plus ``dataset.json`` (schema, row counts, classes),
published atomically with a checksum manifest.
"""

from __future__ import annotations

import io
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kftrain import storage
from kftrain.errors import KftrainError

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
LABEL = "label"
DATASET_INFO = "dataset.json"
BUILTIN_DIGITS = "builtin:digits"


class DataValidationError(KftrainError):
    """The input data cannot be used: the message says which column or row."""


@dataclass
class DatasetInfo:
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


def load_source(source: str, label_column: str = LABEL) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (float32) and integer labels from ``source``."""
    if source == BUILTIN_DIGITS:
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)  # pixel intensities 0..16 -> 0..1
        names = [f"pixel_{i:02d}" for i in range(x.shape[1])]
        return x, digits.target.astype(np.int64), names
    raw = storage.read_bytes(source)
    if source.endswith(".csv"):
        import pyarrow.csv as pacsv

        table = pacsv.read_csv(io.BytesIO(raw))
    else:
        table = pq.read_table(io.BytesIO(raw))
    if label_column not in table.column_names:
        raise DataValidationError(
            f"{source}: no label column {label_column!r} (columns: {', '.join(table.column_names)})"
        )
    names = [c for c in table.column_names if c != label_column]
    for name in [*names, label_column]:
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise DataValidationError(f"{source}: column {name!r} is {col.type}, expected a number")
        if col.null_count:
            raise DataValidationError(f"{source}: column {name!r} has {col.null_count} null value(s)")
    x = np.column_stack([table.column(n).to_numpy().astype(np.float32) for n in names])
    y = table.column(label_column).to_numpy()
    if not np.all(np.equal(np.mod(y, 1), 0)):
        raise DataValidationError(f"{source}: label column {label_column!r} must hold whole numbers")
    return x, y.astype(np.int64), names


def validate(x: np.ndarray, y: np.ndarray, source: str) -> None:
    if len(x) != len(y):
        raise DataValidationError(f"{source}: {len(x)} feature rows but {len(y)} labels")
    if len(x) < 10:
        raise DataValidationError(f"{source}: only {len(x)} rows; need at least 10 to split")
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        row, col = bad[0]
        raise DataValidationError(f"{source}: non-finite value at row {row}, feature {col}")
    if y.min() < 0:
        raise DataValidationError(f"{source}: labels must be >= 0 (class indices), found {y.min()}")


def split_indices(y: np.ndarray, seed: int, validation_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Stratified train/validation/test indices, reproducible from ``seed``."""
    from sklearn.model_selection import train_test_split

    if not 0 < test_fraction < 1 or not 0 <= validation_fraction < 1 or test_fraction + validation_fraction >= 1:
        raise DataValidationError(
            f"fractions: test ({test_fraction}) and validation ({validation_fraction}) must be in (0, 1) "
            "and sum to less than 1"
        )
    idx = np.arange(len(y))
    rest, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=y)
    out = {"test": np.sort(test)}
    if validation_fraction > 0:
        val_share = validation_fraction / (1 - test_fraction)
        train, val = train_test_split(rest, test_size=val_share, random_state=seed, stratify=y[rest])
        out["validation"] = np.sort(val)
    else:
        train, out["validation"] = rest, np.array([], dtype=np.int64)
    out["train"] = np.sort(train)
    return out


def _table(x: np.ndarray, y: np.ndarray, names: list[str]) -> pa.Table:
    columns = {name: pa.array(x[:, i], type=pa.float32()) for i, name in enumerate(names)}
    columns[LABEL] = pa.array(y, type=pa.int64())
    return pa.table(columns)


def prepare_dataset(
    output_uri: str,
    *,
    source: str = BUILTIN_DIGITS,
    label_column: str = LABEL,
    seed: int = 42,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    train_shards: int = 2,
) -> DatasetInfo:
    """Ingest, validate, split, shard and write ``source`` to ``output_uri``."""
    if train_shards < 1:
        raise DataValidationError(f"train_shards must be >= 1, got {train_shards}")
    started = time.monotonic()
    x, y, names = load_source(source, label_column)
    validate(x, y, source)
    log.info("loaded %s: %d rows x %d features", source, len(x), x.shape[1])
    parts = split_indices(y, seed, validation_fraction, test_fraction)
    classes = sorted(int(c) for c in np.unique(y))
    shards: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    with storage.ArtifactWriter(output_uri) as writer:
        for split in SPLITS:
            idx = parts[split]
            count = train_shards if split == "train" else 1
            shards[split] = []
            for shard, shard_idx in enumerate(np.array_split(idx, count)):
                rel = f"{split}/part-{shard:05d}-of-{count:05d}.parquet"
                with writer.open(rel) as handle:
                    pq.write_table(_table(x[shard_idx], y[shard_idx], names), handle, compression="zstd")
                shards[split].append(rel)
            rows[split] = len(idx)
            log.info("wrote %s: %d rows in %d shard(s)", split, len(idx), count)
        info = DatasetInfo(
            source=source,
            num_features=len(names),
            num_classes=len(classes),
            feature_names=names,
            classes=classes,
            rows=rows,
            shards=shards,
            seed=seed,
            schema={**{n: "float32" for n in names[:3]}, "...": f"{len(names)} float32 features", LABEL: "int64"},
        )
        writer.metadata = info.to_metadata()
        writer.write_json(DATASET_INFO, asdict(info))
    log.info("dataset ready at %s in %.2fs", output_uri, time.monotonic() - started)
    return info


def read_info(dataset_uri: str) -> DatasetInfo:
    storage.require_complete(dataset_uri)
    return DatasetInfo(**storage.read_json(storage.join(dataset_uri, DATASET_INFO)))


def load_split(
    dataset_uri: str, split: str, *, shard_index: int | None = None, num_shards: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of ``split``; with ``shard_index``/``num_shards`` only every num_shards-th file."""
    info = read_info(dataset_uri)
    if split not in info.shards:
        raise DataValidationError(f"{dataset_uri}: no split {split!r} (have {', '.join(info.shards)})")
    files = info.shards[split]
    if shard_index is not None and num_shards:
        files = files[shard_index::num_shards]
    tables = []
    for rel in files:
        with storage.open_uri(storage.join(dataset_uri, rel), "rb") as handle:
            tables.append(pq.read_table(handle))
    table = (
        pa.concat_tables(tables)
        if tables
        else _table(np.zeros((0, info.num_features), np.float32), np.zeros(0, np.int64), info.feature_names)
    )
    x = np.column_stack([table.column(n).to_numpy() for n in info.feature_names]).astype(np.float32)
    y = table.column(LABEL).to_numpy().astype(np.int64)
    return x, y

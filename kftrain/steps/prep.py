"""The data-prep step: ingest a tabular classification dataset, validate it, split it, shard it, write Parquet.

Sources: ``builtin:digits`` (scikit-learn's bundled 8x8 digits, 1,797 images, no download) or a
Parquet/CSV file by URI with a label column. The output is a prepared dataset in the format
:mod:`kftrain.data.dataset` describes and reads: one folder per split
(``train/part-00000-of-00002.parquet`` ...) plus ``dataset.json`` (schema, row counts, classes),
published atomically with a checksum manifest.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import asdict

from kftrain import storage
from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

from kftrain.data.dataset import DATASET_INFO, LABEL, SPLITS, DatasetInfo, DataValidationError
from kftrain.progress import Progress

log = logging.getLogger(__name__)

BUILTIN_DIGITS = "builtin:digits"


def load_source(source: str, label_column: str = LABEL) -> pa.Table:
    """The source as an Arrow table of float32 features and an int64 ``label`` column, validated.

    The data stays in Arrow from reading to writing: a 1 GiB table is never copied into a numpy
    feature matrix, only its label column is (for the stratified split).
    """
    if source == BUILTIN_DIGITS:
        with requires("data", "the builtin:digits sample"):
            from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)  # pixel intensities 0..16 -> 0..1
        names = [f"pixel_{i:02d}" for i in range(x.shape[1])]
        return _table(x, digits.target.astype(np.int64), names)
    with storage.open_uri(source, "rb") as handle:
        if source.endswith(".csv"):
            import pyarrow.csv as pacsv

            table = pacsv.read_csv(handle)
        else:
            table = pq.read_table(handle)
    return normalize_table(table, label_column, source)


def normalize_table(table: pa.Table, label_column: str, source: str) -> pa.Table:
    """Check every column and cast: features to float32, the label to int64 named ``label``."""
    if label_column not in table.column_names:
        raise DataValidationError(
            f"{source}: no label column {label_column!r} (columns: {', '.join(table.column_names)})"
        )
    names = [c for c in table.column_names if c != label_column]
    if not names:
        raise DataValidationError(f"{source}: no feature columns besides {label_column!r}")
    columns = []
    for name in [*names, label_column]:
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise DataValidationError(f"{source}: column {name!r} is {col.type}, expected a number")
        if col.null_count:
            raise DataValidationError(f"{source}: column {name!r} has {col.null_count} null value(s)")
        if pa.types.is_floating(col.type) and not pc.all(pc.is_finite(col)).as_py():
            row = pc.index(pc.is_finite(col), False).as_py()
            raise DataValidationError(f"{source}: non-finite value in column {name!r} at row {row}")
        columns.append(col)
    labels = columns.pop()
    if pa.types.is_floating(labels.type) and not pc.all(pc.equal(pc.floor(labels), labels)).as_py():
        raise DataValidationError(f"{source}: label column {label_column!r} must hold whole numbers")
    features = [c if c.type == pa.float32() else pc.cast(c, pa.float32()) for c in columns]
    return pa.table([*features, pc.cast(labels, pa.int64())], names=[*names, LABEL])


def validate(table: pa.Table, source: str) -> None:
    """Enough rows to split, and labels usable as class indices."""
    if len(table) < 10:
        raise DataValidationError(f"{source}: only {len(table)} rows; need at least 10 to split")
    low = pc.min(table.column(LABEL)).as_py()
    if low < 0:
        raise DataValidationError(f"{source}: labels must be >= 0 (class indices), found {low}")


def split_indices(y: np.ndarray, seed: int, validation_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Stratified train/validation/test indices (sorted), reproducible from ``seed``.

    Each class is shuffled on its own and cut by the fractions, so every split keeps the class
    proportions. numpy only: a stable argsort groups the classes in one pass over the labels.
    """
    if not 0 < test_fraction < 1 or not 0 <= validation_fraction < 1 or test_fraction + validation_fraction >= 1:
        raise DataValidationError(
            f"fractions: test ({test_fraction}) and validation ({validation_fraction}) must be in (0, 1) "
            "and sum to less than 1"
        )
    rng = np.random.default_rng(seed)
    order = np.argsort(y, kind="stable")
    _, starts = np.unique(y[order], return_index=True)
    parts: dict[str, list[np.ndarray]] = {"train": [], "validation": [], "test": []}
    for group in np.split(order, starts[1:]):
        group = rng.permutation(group)
        n_test = round(len(group) * test_fraction)
        n_val = round(len(group) * validation_fraction)
        parts["test"].append(group[:n_test])
        parts["validation"].append(group[n_test : n_test + n_val])
        parts["train"].append(group[n_test + n_val :])
    out = {name: np.sort(np.concatenate(chunks)).astype(np.int64) for name, chunks in parts.items()}
    if len(out["train"]) == 0 or len(out["test"]) == 0:
        sizes = f"train {len(out['train'])}, test {len(out['test'])}"
        raise DataValidationError(f"the fractions leave an empty split ({sizes})")
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
    table = load_source(source, label_column)
    validate(table, source)
    names = [c for c in table.column_names if c != LABEL]
    y = table.column(LABEL).to_numpy()
    log.info("loaded %s: %d rows x %d features", source, len(table), len(names))
    parts = split_indices(y, seed, validation_fraction, test_fraction)
    classes = sorted(int(c) for c in np.unique(y))
    shards: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    progress = Progress(total=len(table), label=f"prep {output_uri}: rows written", stream=sys.stdout)
    with storage.ArtifactWriter(output_uri) as writer, progress:
        for split in SPLITS:
            idx = parts[split]
            count = train_shards if split == "train" else 1
            shards[split] = []
            rows_of_split = table.take(pa.array(idx))  # sorted indices: a sequential gather
            for shard, bounds in enumerate(np.array_split(np.arange(len(idx)), count)):
                rel = f"{split}/part-{shard:05d}-of-{count:05d}.parquet"
                start = int(bounds[0]) if len(bounds) else 0
                _write_parquet(writer, rel, rows_of_split.slice(start, len(bounds)))
                progress.update(len(bounds))
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


def _write_parquet(writer: storage.ArtifactWriter, rel: str, table: pa.Table) -> None:
    """One Parquet shard, zstd; only the label is dictionary-encoded.

    Continuous features gain nothing from a dictionary, and building one costs most of the write
    time: in a shard too small for the writer to give up on it (< ~260k distinct floats per column
    chunk) every value gets hashed. Measured on 1M rows x 64 float32: 4.3 s with, 0.5 s without.
    """
    target = writer.path_for(rel)
    if "://" not in target:
        # Arrow writes a local path natively, about twice as fast as through a Python file object.
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pq.write_table(table, target, compression="zstd", use_dictionary=[LABEL])
        writer.record(rel)
        return
    with writer.open(rel) as handle:
        pq.write_table(table, handle, compression="zstd", use_dictionary=[LABEL])

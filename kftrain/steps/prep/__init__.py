"""The data-prep step: read a tabular source, check it, encode it, split it, shard it, publish a prepared dataset.

Two streaming passes: :mod:`~kftrain.steps.prep.profile` finds every column's type, statistics and vocabulary and
every problem before anything is written; then :mod:`~kftrain.steps.prep.encode`, :mod:`~kftrain.steps.prep.split`
(stratified) and :mod:`~kftrain.steps.prep.shards` write inside one :class:`kftrain.storage.ArtifactWriter` (a
failure publishes nothing). Sources: :mod:`~kftrain.steps.prep.sources`; ``mode="files"`` prepares a list of files
(:mod:`~kftrain.steps.prep.files`). The output format is :mod:`kftrain.data.dataset`'s.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict

from kftrain import storage
from kftrain.extras import requires

with requires("data", "data prep"):  # before the modules below, so a missing one is named as prep's
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401

from kftrain.data.dataset import (
    BATCH_ROWS,
    CLASSIFICATION,
    DATASET_INFO,
    LABEL,
    REGRESSION,
    SPLITS,
    TABLE,
    DatasetInfo,
    DataValidationError,
)
from kftrain.progress import Progress
from kftrain.steps.prep import sources
from kftrain.steps.prep.encode import encode
from kftrain.steps.prep.files import prepare_files
from kftrain.steps.prep.overlap import OverlapCounter
from kftrain.steps.prep.profile import POLICIES, REFUSE, Plan, Profile, check_columns
from kftrain.steps.prep.shards import ShardWriter
from kftrain.steps.prep.split import SplitCodes, check_fractions

log = logging.getLogger(__name__)

BUILTIN_DIGITS = "builtin:digits"
MODES = (TABLE, "files")
TASKS = (CLASSIFICATION, REGRESSION)
SHARD_BYTES = 64 * 1024 * 1024

__all__ = ["BUILTIN_DIGITS", "prepare_dataset"]


def prepare_dataset(
    output_uri: str,
    *,
    source: str = BUILTIN_DIGITS,
    label_column: str = LABEL,
    task: str = CLASSIFICATION,
    features: list[str] | tuple[str, ...] = (),
    format: str = "auto",
    missing: str = REFUSE,
    seed: int = 42,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    train_shards: int = 2,
    shard_bytes: int = SHARD_BYTES,
    max_categories: int = 1000,
    mode: str = TABLE,
    path_column: str = "path",
    batch_rows: int = BATCH_ROWS,
) -> DatasetInfo:
    """Prepare ``source`` at ``output_uri``; every input error is raised before anything is written there."""
    check_inputs(task, missing, mode, train_shards, shard_bytes, max_categories, validation_fraction, test_fraction)
    if mode == "files":
        return prepare_files(
            output_uri,
            source=source,
            label_column=label_column,
            path_column=path_column,
            seed=seed,
            validation_fraction=validation_fraction,
            test_fraction=test_fraction,
            shard_bytes=shard_bytes,
        )
    started = time.monotonic()
    src = sources.resolve(source, format)
    first = sources.dataset(src, None) if src.table is None else None
    schema = src.table.schema if src.table is not None else first.schema  # type: ignore[union-attr]
    chosen = check_columns(schema, label_column, list(features), source)
    if missing == REFUSE:
        for where, lacking in sources.missing_columns(src, first).items():
            used = [c for c in lacking if c in (*chosen, label_column)]
            if used:
                raise DataValidationError(
                    f"{where}: no column {used[0]!r} (other files have it); set missing=drop or fill"
                )
    profile = Profile(
        schema,
        label=label_column,
        features=chosen,
        task=task,
        policy=missing,
        max_categories=max_categories,
        text=src.format == sources.CSV,
    )
    columns = [*chosen, label_column]
    for where, offset, batch in sources.batches(src, first, batch_rows, columns):
        profile.observe(where, offset, batch)
    plan = profile.plan()
    sources.check_unchanged(src)  # the second pass must read what the first one profiled
    groups = plan.class_counts if task == CLASSIFICATION else [plan.rows]
    splits = SplitCodes(groups, seed, validation_fraction, test_fraction)
    log.info("%s: %d rows x %d features, %s; %s", source, plan.rows, len(chosen), _task_summary(plan), splits.sizes())
    second = sources.dataset(src, plan.text_types) if src.format == sources.CSV else first
    with storage.ArtifactWriter(output_uri) as writer:
        try:
            info = _write(writer, src, second, plan, splits, columns, train_shards, shard_bytes, batch_rows, seed)
        except DataValidationError:
            sources.check_unchanged(src)  # a file that changed under the second pass explains its error best
            raise
        sources.check_unchanged(src)  # nor changed while it was read: then nothing is published
    log.info("dataset ready at %s in %.2fs", output_uri, time.monotonic() - started)
    return info


def check_inputs(
    task: str,
    missing: str,
    mode: str,
    train_shards: int,
    shard_bytes: int,
    max_categories: int,
    validation_fraction: float,
    test_fraction: float,
) -> None:
    for name, value, allowed in (("task", task, TASKS), ("missing", missing, POLICIES), ("mode", mode, MODES)):
        if value not in allowed:
            raise DataValidationError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    if train_shards < 1:
        raise DataValidationError(f"train_shards must be >= 1, got {train_shards}")
    if shard_bytes < 1024 * 1024:
        raise DataValidationError(f"shard_bytes must be at least 1 MiB, got {shard_bytes}")
    if max_categories < 2:
        raise DataValidationError(f"max_categories must be >= 2, got {max_categories}")
    check_fractions(validation_fraction, test_fraction)


def _task_summary(plan: Plan) -> str:
    if plan.task == REGRESSION:
        return "regression"
    return f"{len(plan.classes)} classes"


def _write(
    writer: storage.ArtifactWriter,
    src: sources.Source,
    data: object,
    plan: Plan,
    splits: SplitCodes,
    columns: list[str],
    train_shards: int,
    shard_bytes: int,
    batch_rows: int,
    seed: int,
) -> DatasetInfo:
    """The second pass: encode, split and shard every batch; then ``dataset.json``."""
    sizes = splits.sizes()
    shard_writers = {
        split: ShardWriter(
            writer,
            split,
            max_rows=-(-sizes[split] // train_shards) if split == "train" else max(sizes[split], 1),
            max_bytes=shard_bytes,
        )
        for split in SPLITS
    }
    overlap = OverlapCounter()
    progress = Progress(total=plan.rows, label=f"prep {writer.uri}: rows written", stream=sys.stdout)
    with progress:
        for where, offset, batch in sources.batches(src, data, batch_rows, columns):
            table, ids = encode(batch, plan, where=f"{where}, rows {offset}-{offset + batch.num_rows - 1}")
            codes = splits.take(ids, table.num_rows, where=where)
            for index, split in enumerate(SPLITS):
                chosen = codes == index
                if chosen.any():
                    part = table.filter(chosen)
                    shard_writers[split].write(part)
                    overlap.add(split, part)
            progress.update(table.num_rows)
    splits.check_all_taken(src.text)
    shards = {split: w.close() for split, w in shard_writers.items()}
    rows = {split: w.rows for split, w in shard_writers.items()}
    for split in SPLITS:
        log.info("wrote %s: %d rows in %d shard(s)", split, rows[split], len(shards[split]))
    for found in overlap.overlaps():
        if found.in_train:  # duplicate rows are common in real tables: counted, not refused
            log.warning(
                "%s (the same features and label): scores on them measure recall, not generalisation", found.line()
            )
    info = DatasetInfo(
        source=src.text,
        num_features=len(plan.features),
        num_classes=len(plan.classes),
        feature_names=plan.features,
        classes=plan.classes,
        rows=rows,
        shards=shards,
        seed=seed,
        schema={**{n: "float32" for n in plan.features}, LABEL: "int64" if plan.task == CLASSIFICATION else "float32"},
        kind=TABLE,
        task=plan.task,
        label_column=plan.label,
        vocabularies=plan.vocabularies,
        statistics=plan.statistics,
        missing={"policy": plan.policy, "dropped_rows": plan.dropped, "filled": plan.fill},
    )
    writer.metadata = info.to_metadata()
    writer.write_json(DATASET_INFO, asdict(info))
    return info

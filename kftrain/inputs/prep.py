"""The ``prepare_dataset`` component's inputs and outputs: the one table its signature is written from and its step
(:func:`kftrain.steps.prep.component.prepare_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import component_input, rows


@dataclass(frozen=True)
class PrepareInputs:
    """What ``prepare_dataset`` is given: the source, how to read, check, split and shard it, and its output."""

    dataset: Any = rows.prepared("<split>/part-NNNNN.parquet shards and dataset.json")
    source: str = component_input(
        "builtin:digits",
        "builtin:digits|breast_cancer|diabetes|wine, or a file, folder, glob or object-store prefix of Parquet, CSV "
        "or JSON Lines files (hive-style key=value folders become columns).",
    )
    label_column: str = component_input(
        "label", 'The label\'s column; in files mode, "folder" labels each file by its folder.'
    )
    task: str = component_input(
        "classification",
        "classification (labels of any type, mapped to ids 0..k-1) or regression (a numeric target).",
    )
    features: list[str] = component_input([], "Feature columns; empty: every column but the label.")
    format: str = rows.file_format("parquet, csv or jsonl")
    missing: str = component_input(
        "refuse",
        "What to do with nulls and NaNs: refuse, drop (the rows), or fill (features: the mean, or the most frequent "
        "value; rows without a label are dropped).",
    )
    seed: int = rows.split_seed("stratified by class for classification")
    validation_fraction: float = component_input(0.1, "Share of rows held out for validation.")
    test_fraction: float = rows.test_fraction(0.2, "rows")
    train_shards: int = component_input(
        2, "The train split is cut into at least this many files (one per reading replica)."
    )
    shard_bytes: int = component_input(64 * 1024 * 1024, "A shard ends once it holds this many bytes (compressed).")
    max_categories: int = component_input(1000, "Most distinct values a string column (or a class label) may have.")
    mode: str = component_input(
        "table", "table (features and a label) or files (a list of files a trainer reads itself, not copied)."
    )
    path_column: str = component_input(
        "path", "Files mode: the manifest's column of paths (relative to the manifest's folder)."
    )


OUTPUTS = (rows.dataset_uri_output("the launch step, evaluation, export"),)

"""KFP component: read a tabular source (or a list of files), check it, encode it, split it and shard it into a
prepared Dataset artifact."""

from typing import NamedTuple

from kfp import dsl

from kftrain_components.images import DATA_IMAGE


@dsl.component(base_image=DATA_IMAGE, install_kfp_package=False)
def prepare_dataset(
    dataset: dsl.Output[dsl.Dataset],
    source: str = "builtin:digits",
    label_column: str = "label",
    task: str = "classification",
    features: list = [],
    format: str = "auto",
    missing: str = "refuse",
    seed: int = 42,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    train_shards: int = 2,
    shard_bytes: int = 67108864,
    max_categories: int = 1000,
    mode: str = "table",
    path_column: str = "path",
) -> NamedTuple("Outputs", [("dataset_uri", str)]):
    """Prepare a dataset: train/validation/test splits as Parquet shards, with schema, statistics and vocabularies.

    Every input problem (a missing column, a NaN, a ragged CSV, an empty or mislabelled file, a single class...)
    fails the step with a message naming the column or file, before anything is written.

    Args:
        dataset: The prepared dataset: <split>/part-NNNNN.parquet shards and dataset.json.
        source: builtin:digits|breast_cancer|diabetes|wine, or a file, folder, glob or object-store prefix of
            Parquet, CSV or JSON Lines files (hive-style key=value folders become columns).
        label_column: The label's column; in files mode, "folder" labels each file by its folder.
        task: classification (labels of any type, mapped to ids 0..k-1) or regression (a numeric target).
        features: Feature columns; empty: every column but the label.
        format: auto (from the file names), parquet, csv or jsonl.
        missing: What to do with nulls and NaNs: refuse, drop (the rows), or fill (features: the mean, or the
            most frequent value; rows without a label are dropped).
        seed: Seed of the split (stratified by class for classification).
        validation_fraction: Share of rows held out for validation.
        test_fraction: Share of rows held out for the final test.
        train_shards: The train split is cut into at least this many files (one per reading replica).
        shard_bytes: A shard ends once it holds this many bytes (compressed).
        max_categories: Most distinct values a string column (or a class label) may have.
        mode: table (features and a label) or files (a list of files a trainer reads itself, not copied).
        path_column: Files mode: the manifest's column of paths (relative to the manifest's folder).

    Returns:
        dataset_uri: Where the dataset was published: steps that read it by URI take this rather than the
            artifact, which KFP's backend copies whole into a step's pod before the step starts.
    """
    from kftrain.steps.prep.component import prepare_component

    prepare_component(
        dataset=dataset,
        source=source,
        label_column=label_column,
        task=task,
        features=features,
        format=format,
        missing=missing,
        seed=seed,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        train_shards=train_shards,
        shard_bytes=shard_bytes,
        max_categories=max_categories,
        mode=mode,
        path_column=path_column,
    )
    return (dataset.uri,)

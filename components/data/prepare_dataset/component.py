"""KFP component: ingest, validate, split and shard a tabular dataset into a Parquet Dataset artifact."""

from kfp import dsl

from kftrain_components.images import DATA_IMAGE


@dsl.component(base_image=DATA_IMAGE, install_kfp_package=False)
def prepare_dataset(
    dataset: dsl.Output[dsl.Dataset],
    source: str = "builtin:digits",
    label_column: str = "label",
    seed: int = 42,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    train_shards: int = 2,
):
    """Prepare a classification dataset: train/validation/test splits as Parquet shards.

    Args:
        dataset: The prepared dataset (a folder of Parquet shards plus dataset.json).
        source: "builtin:digits" (scikit-learn's bundled digits) or a Parquet/CSV URI.
        label_column: Name of the label column in a Parquet/CSV source.
        seed: Seed of the stratified split.
        validation_fraction: Share of rows held out for validation.
        test_fraction: Share of rows held out for the final test.
        train_shards: Number of Parquet files the train split is cut into.
    """
    import logging

    from kftrain.steps.prep import prepare_dataset as prepare
    from kftrain.storage import output_uri

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    dataset.uri = output_uri(dataset.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    info = prepare(
        dataset.uri,
        source=source,
        label_column=label_column,
        seed=seed,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        train_shards=train_shards,
    )
    dataset.metadata.update(info.to_metadata())

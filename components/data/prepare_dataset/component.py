"""Prepare a dataset: train/validation/test splits as Parquet shards, with schema, statistics and vocabularies.

Every input problem (a missing column, a NaN, a ragged CSV, an empty or mislabelled file, a single class...)
fails the step with a message naming the column or file, before anything is written.
"""

from kftrain.inputs.prep import OUTPUTS, PrepareInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import DATA_IMAGE

prepare_dataset = step_component(
    __name__, PrepareInputs, "kftrain.steps.prep.component:prepare_component", outputs=OUTPUTS, image=DATA_IMAGE
)

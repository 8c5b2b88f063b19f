"""The body of the ``prepare_dataset`` component: prepare, then describe the Dataset artifact for KFP's UI."""

from __future__ import annotations

import dataclasses
from typing import Any

from kftrain.inputs.prep import PrepareInputs
from kftrain.step import component_step
from kftrain.steps.prep import prepare_dataset


def prepare_component(**values: Any) -> tuple[str]:
    """Prepare the source ``values`` (:class:`PrepareInputs`) name into its ``dataset``; a user error ends the step
    naming the column or file. Returns where the dataset was published."""
    given = PrepareInputs(**values)
    dataset = given.dataset
    options = {f.name: getattr(given, f.name) for f in dataclasses.fields(given) if f.name != "dataset"}
    with component_step(dataset):
        info = prepare_dataset(dataset.uri, **options)
        dataset.metadata.update(info.to_metadata())
    return (dataset.uri,)

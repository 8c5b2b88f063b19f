"""The body of the ``prepare_dataset`` component: prepare, then describe the Dataset artifact for KFP's UI."""

from __future__ import annotations

from typing import Any

from kftrain.step import Artifact, component_step
from kftrain.steps.prep import prepare_dataset


def prepare_component(*, dataset: Artifact, **inputs: Any) -> None:
    """Prepare the source ``inputs`` name into ``dataset``; a user error ends the step naming the column or file."""
    with component_step(dataset):
        info = prepare_dataset(dataset.uri, **inputs)
        dataset.metadata.update(info.to_metadata())

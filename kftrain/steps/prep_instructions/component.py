"""The body of the ``prepare_instructions`` component: prepare, then describe the Dataset artifact for KFP's UI."""

from __future__ import annotations

import dataclasses
from typing import Any

from kftrain.inputs.prep_instructions import PrepareInstructionsInputs
from kftrain.step import component_step


def prepare_instructions_component(**values: Any) -> tuple[str]:
    """Prepare the source ``values`` (:class:`PrepareInstructionsInputs`) name into its ``dataset``; a user error
    ends the step naming the field, file and line. Returns where the dataset was published."""
    given = PrepareInstructionsInputs(**values)
    dataset = given.dataset
    options = {f.name: getattr(given, f.name) for f in dataclasses.fields(given) if f.name != "dataset"}
    with component_step(dataset):
        from kftrain.steps.prep_instructions import prepare_instructions

        dataset.metadata.update(prepare_instructions(dataset.uri, **options))
    return (dataset.uri,)

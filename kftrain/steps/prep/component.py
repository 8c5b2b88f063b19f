"""The body of the ``prepare_dataset`` component: prepare, then describe the Dataset artifact for KFP's UI."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kftrain import storage
from kftrain.errors import step_errors
from kftrain.steps.prep import prepare_dataset


class Artifact(Protocol):
    uri: str
    metadata: dict[str, Any]


def prepare_component(*, dataset: Artifact, **inputs: Any) -> None:
    """Prepare the source ``inputs`` name into ``dataset``; a user error ends the step naming the column or file."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    with step_errors():
        dataset.uri = storage.output_uri(dataset.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
        info = prepare_dataset(dataset.uri, **inputs)
    dataset.metadata.update(info.to_metadata())

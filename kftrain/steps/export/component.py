"""The body of the ``export_model`` component: export, then hand KFP the repository and the KServe manifest."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kftrain import storage
from kftrain.errors import step_errors
from kftrain.steps.export import export_model
from kftrain.steps.export.serving import manifest_yaml
from kftrain.storage.io import write_once


class Artifact(Protocol):
    uri: str
    metadata: dict[str, Any]


def export_component(
    *,
    model: Artifact,
    dataset: Artifact,
    exported: Artifact,
    inference_service: Artifact,
    model_name: str,
    targets: list[str],
    verify_rows: int,
) -> None:
    """Export ``model`` into ``exported``; write the InferenceService serving it into ``inference_service``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    with step_errors():
        exported.uri = storage.output_uri(exported.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
        inference_service.uri = storage.output_uri(inference_service.uri)
        report = export_model(
            model.uri,
            dataset.uri,
            exported.uri,
            model_name=model_name,
            targets=tuple(targets) or None,
            verify_rows=verify_rows,
        )
        # Whole or not at all: a step killed while writing leaves no half manifest at the output.
        write_once(iter([manifest_yaml(report.inference_service).encode()]), inference_service.uri)
    exported.metadata.update(report.to_metadata())
    inference_service.metadata.update({"kind": "InferenceService", "name": model_name, "storageUri": _served(report)})


def _served(report: Any) -> str:
    return str(report.inference_service["spec"]["predictor"]["model"]["storageUri"])

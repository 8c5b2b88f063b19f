"""The body of the ``export_model`` component: export, then hand KFP the repository and the KServe manifest."""

from __future__ import annotations

from typing import Any

from kftrain.step import Artifact, component_step
from kftrain.steps.export import export_model
from kftrain.steps.export.serving import manifest_yaml
from kftrain.storage.io import write_once


def export_component(
    *,
    model: Artifact,
    dataset_uri: str,
    exported: Artifact,
    inference_service: Artifact,
    model_name: str,
    targets: list[str],
    verify_rows: int,
) -> None:
    """Export ``model`` into ``exported``; write the InferenceService serving it into ``inference_service``."""
    with component_step(exported, inference_service, inputs={"model": model.uri, "dataset_uri": dataset_uri}):
        report = export_model(
            model.uri,
            dataset_uri,
            exported.uri,
            model_name=model_name,
            targets=tuple(targets) or None,
            verify_rows=verify_rows,
        )
        # Whole or not at all: a step killed while writing leaves no half manifest at the output.
        write_once(iter([manifest_yaml(report.inference_service).encode()]), inference_service.uri)
        exported.metadata.update(report.to_metadata())
        served = _served(report)
        inference_service.metadata.update({"kind": "InferenceService", "name": model_name, "storageUri": served})


def _served(report: Any) -> str:
    return str(report.inference_service["spec"]["predictor"]["model"]["storageUri"])

"""The body of the ``export_model`` component: export, then hand KFP the repository and the KServe manifest."""

from __future__ import annotations

from typing import Any

from kftrain.inputs.export import ExportInputs
from kftrain.step import component_step
from kftrain.steps.export import export_model
from kftrain.storage.io import write_once
from kftrain.tracking.client import TaskRun, task_run
from kftrain.tracking.export import check_registration, log_export, register_export


def export_component(**values: Any) -> tuple[str]:
    """Export the model into ``exported``; write the InferenceService serving it into ``inference_service``; with
    MLflow tracking, tag the task's run with where everything went and, given ``register_model``, register the
    export (:mod:`kftrain.tracking.export`). ``values``: :class:`ExportInputs`; returns the registered version ("" when
    none)."""
    given = ExportInputs(**values)
    model, exported, inference_service, model_name = (
        given.model,
        given.exported,
        given.inference_service,
        given.model_name,
    )
    version = ""
    with (
        component_step(exported, inference_service, inputs={"model": model.uri, "dataset_uri": given.dataset_uri}),
        task_run("export's MLflow logging", given.mlflow_tracking_uri, "export-model") as tracked,
    ):
        check_registration(given.register_model, given.mlflow_tracking_uri)
        report = export_model(
            model.uri,
            given.dataset_uri,
            exported.uri,
            model_name=model_name,
            targets=tuple(given.targets) or None,
            verify_rows=given.verify_rows,
        )
        # Whole or not at all: a step killed while writing leaves no half manifest at the output.
        write_once(iter([report.manifest().encode()]), inference_service.uri)
        exported.metadata.update(report.to_metadata())
        served = _served(report)
        inference_service.metadata.update({"kind": "InferenceService", "name": model_name, "storageUri": served})
        if tracked is not None:
            paths = {e.target: e.path for e in report.exports}
            log_export(tracked, exported.uri, paths, served, inference_service.uri)
            if given.register_model:
                version = register(tracked, given)
    return (version,)


def register(tracked: TaskRun, given: Any, source: str = "") -> str:
    """Register an export step's ``exported`` as ``register_model``'s new version, with the evaluation it was given
    (``evaluation_metrics``' metadata, ``gate_passed``) and the model it was exported from: ``given`` is
    :class:`ExportInputs` or the language model's table, which share those inputs. Returns the version ("" when the
    server failed); ``source``: :func:`~kftrain.tracking.export.register_export`'s."""
    return register_export(
        tracked,
        given.register_model,
        given.exported.uri,
        evaluation=dict(getattr(given.evaluation_metrics, "metadata", None) or {}),
        gate_passed=given.gate_passed,
        model_uri=given.model.uri,
        source=source,
    )


def _served(report: Any) -> str:
    return str(report.inference_service["spec"]["predictor"]["model"]["storageUri"])

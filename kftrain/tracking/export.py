"""What export logs into its task's MLflow run, and the hand-off to MLflow's Model Registry.

The run is tagged with where every serving layout went (``kftrain.export.<target>``: the Triton repository's
model folder, the TF Serving layout...), the export's own URI, the InferenceService manifest and the URI KServe
serves. With ``register_model`` set, the export becomes a new version of that registered model (created when it
does not exist): its source is the export's URI, its run the export's task run, and it is tagged with the pipeline
run (``kfp.pipeline_run_id``, as KFP tags the pipeline's MLflow run: kubeflow/pipelines@2.17.0:
backend/src/apiserver/plugins/mlflow/run_start.go, BuildKFPTags), the evaluation's metrics (``evaluation.<name>``)
and the quality gate's verdict (``kftrain.gate.passed``). The step outputs the version.

A tracking server refuses a local path as a version's source unless it lies inside the run's own artifact
folder (mlflow/mlflow@v3.17.2:mlflow/server/handlers.py, _validate_source_run); an object-store URI (``s3://``,
``gs://``: every export on a cluster) it takes as it is. An export on this machine's disk is therefore also
logged as the run's artifacts (``exported/``) and registered from there (``runs:/<run>/exported``), the local
path kept in the version's ``kftrain.exported_uri`` tag.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.storage.uri import is_local, join, local_path
from kftrain.tracking.client import TaskRun, TrackingError, why_refused
from kftrain.tracking.env import RUN_ID, TRACKING_URI, tracking_from_env

log = logging.getLogger(__name__)

ARTIFACT_PATH = "exported"


def check_registration(name: str) -> None:
    """Refuse, before anything is exported, a registered model name MLflow would refuse
    (mlflow/mlflow@v3.17.2:mlflow/utils/validation.py, _validate_model_name), or a registration without MLflow."""
    if not name:
        return
    if name != name.strip() or "/" in name or ":" in name or name in (".", ".."):
        raise JobSpecError(
            "register_model", f"{name!r}: a registered model's name has no '/' or ':' nor surrounding spaces"
        )
    if tracking_from_env() is None:
        raise JobSpecError(
            "register_model",
            f"registering needs MLflow tracking: {TRACKING_URI} and {RUN_ID}, which KFP 2.17's MLflow plugin sets "
            "(kftrain run --mlflow URI locally)",
        )


def log_export(run: TaskRun, exported_uri: str, paths: Mapping[str, str], served_uri: str, manifest_uri: str) -> None:
    """Tag the run with the export's URI, each target's (``paths``: target -> path inside the export), the URI
    KServe serves and the InferenceService manifest's."""
    tags: dict[str, Any] = {
        "kftrain.step": "export",
        "kftrain.export.uri": exported_uri,
        "kftrain.export.served_uri": served_uri,
        "kftrain.export.inference_service": manifest_uri,
    }
    tags.update({f"kftrain.export.{target}": join(exported_uri, path) for target, path in paths.items()})
    run.set_tags(tags)


def register_export(
    run: TaskRun,
    name: str,
    exported_uri: str,
    *,
    evaluation: Mapping[str, Any] | None = None,
    gate_passed: bool | None = None,
    model_uri: str = "",
) -> str:
    """Register the export as a new version of ``name``; returns the version."""
    pipeline_run_id, pipeline_tags = run.pipeline_run()
    tags: dict[str, str] = {"kftrain.exported_uri": exported_uri, "kftrain.model_uri": model_uri}
    for key in ("kfp.pipeline_run_id", "kfp.pipeline_run_url"):
        if pipeline_tags.get(key):
            tags[key] = pipeline_tags[key]
    if pipeline_run_id:
        tags["kftrain.pipeline_mlflow_run_id"] = pipeline_run_id
    for metric, value in (evaluation or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            tags[f"evaluation.{metric}"] = str(value)
    if gate_passed is not None:
        tags["kftrain.gate.passed"] = str(gate_passed).lower()
    source = exported_uri
    if is_local(exported_uri) and not _local_store(run.tracking.uri):
        run.log_folder(str(local_path(exported_uri)), ARTIFACT_PATH)
        source = f"runs:/{run.run_id}/{ARTIFACT_PATH}"
    _ensure_registered_model(run, name)
    version = run.call(
        f"register {name!r}",
        "create_model_version",
        name,
        source,
        run_id=run.run_id,
        tags={k: v for k, v in tags.items() if v},
        description=f"Exported from {exported_uri}",
        await_creation_for=0,
    )
    log.info("registered %s version %s (source %s) in %s", name, version.version, source, run.where())
    return str(version.version)


def _ensure_registered_model(run: TaskRun, name: str) -> None:
    try:
        run.client.create_registered_model(name)
    except Exception as exc:
        if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
            raise TrackingError(f"MLflow: could not create the registered model {name!r}: {why_refused(exc)}") from None


def _local_store(tracking_uri: str) -> bool:
    """Whether the tracking URI is a store this process writes itself (a folder, ``sqlite:``...), not a server:
    such a store takes a local path as a version's source."""
    return not tracking_uri.startswith(("http://", "https://", "databricks"))

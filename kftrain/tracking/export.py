"""What export logs into its task's MLflow run, and the hand-off to MLflow's Model Registry.

The run is tagged with where every serving layout went (``kftrain.export.<target>``), the export's URI, the
InferenceService manifest and the URI KServe serves. With ``register_model`` set, the export becomes a new version
of that registered model, tagged with the pipeline run, the evaluation's metrics and the gate's verdict. A tracking
server takes no local path as a version's source (mlflow/mlflow@v3.17.2:mlflow/server/handlers.py,
_validate_source_run), so an export on this machine's disk is uploaded as the run's ``exported/`` and registered
from there. Best-effort: a failure is a warning, and the export stays done.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.storage.uri import is_local, join, local_path, split_uri
from kftrain.tracking.calls import TrackingError
from kftrain.tracking.client import TaskRun
from kftrain.tracking.env import RUN_ID, TRACKING_URI, tracking_from_env

log = logging.getLogger(__name__)

ARTIFACT_PATH = "exported"


def check_model_name(name: str) -> None:
    """Refuse a registered model name MLflow would refuse (mlflow/mlflow@v3.17.2:mlflow/utils/validation.py:692,
    _validate_model_name: no '/' or ':'; :342, path_not_unique: as a path it is itself, not '.', no '..' first)."""
    norm = posixpath.normpath(name)
    clashes = norm != name or norm == "." or norm.startswith("..")  # a name that, as a path, is another
    if name and (name != name.strip() or "/" in name or ":" in name or clashes):
        raise JobSpecError(
            "register_model",
            f"{name!r}: a registered model's name has no '/' or ':', does not start with '..', is not '.', and has "
            "no surrounding spaces",
        )


def check_registration(name: str, uri: str = "") -> bool:
    """Whether the export is to be registered: refuse, before anything is exported, a name MLflow would refuse;
    without MLflow tracking (``uri``: the step's tracking-URI input), a warning and no registration: the export,
    which the training's model is worth, goes on (``kftrain run`` refuses this before any step)."""
    if not name:
        return False
    check_model_name(name)
    if tracking_from_env(uri=uri) is None:
        log.warning(
            "register_model %r: not registered: registering needs MLflow tracking (%s and %s, which KFP 2.17's "
            "MLflow plugin sets with injectUserEnvVars, or the step's tracking URI input); the export goes on",
            name,
            TRACKING_URI,
            RUN_ID,
        )
        return False
    return True


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
    source: str = "",
) -> str:
    """Register the export as a new version of ``name``; returns the version, "" (and a warning) when the tracking
    server failed: the export stays where it is. ``source``: what the version is made from when not the export's
    files (a model the run logged in an MLflow flavor, ``runs:/<run>/<path>``)."""
    try:
        return _register(run, name, exported_uri, evaluation or {}, gate_passed, model_uri, source)
    except TrackingError as exc:
        log.warning("%s; the export is kept at %s, not registered", exc, exported_uri)
        return ""


def _register(
    run: TaskRun,
    name: str,
    exported_uri: str,
    evaluation: Mapping[str, Any],
    gate_passed: bool | None,
    model_uri: str,
    logged: str,
) -> str:
    pipeline_run_id, pipeline_tags = run.pipeline_run()
    tags: dict[str, str] = {"kftrain.exported_uri": exported_uri, "kftrain.model_uri": model_uri}
    for key in ("kfp.pipeline_run_id", "kfp.pipeline_run_url"):
        if pipeline_tags.get(key):
            tags[key] = pipeline_tags[key]
    if pipeline_run_id:
        tags["kftrain.pipeline_mlflow_run_id"] = pipeline_run_id
    for metric, value in evaluation.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            tags[f"evaluation.{metric}"] = str(value)
    if gate_passed is not None:
        tags["kftrain.gate.passed"] = str(gate_passed).lower()
    # MLflow downloads s3:// at MLFLOW_S3_ENDPOINT_URL; minio:// (KFP's store) is the same bucket, a scheme it lacks.
    scheme, path = split_uri(exported_uri)
    source = f"s3://{path}" if scheme == "s3" else exported_uri
    if logged:
        source = logged
    elif is_local(exported_uri) and not _local_store(run.tracking.uri):
        run.call(f"log {ARTIFACT_PATH}/", "log_artifacts", run.run_id, str(local_path(exported_uri)), ARTIFACT_PATH)
        source = f"runs:/{run.run_id}/{ARTIFACT_PATH}"
    try:
        run.call(f"create the registered model {name!r}", "create_registered_model", name)
    except TrackingError as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
            raise
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


def _local_store(tracking_uri: str) -> bool:
    """Whether the tracking URI is a store this process writes itself (a folder, ``sqlite:``...), not a server:
    such a store takes a local path as a version's source."""
    return not tracking_uri.startswith(("http://", "https://", "databricks"))

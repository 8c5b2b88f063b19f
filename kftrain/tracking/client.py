"""The task's MLflow run, as a step logs into it: opened and checked before the step does its work.

A tracking server that is down, refuses the credentials or has no such run ends the step before anything is
created, with one line naming the server (its credentials redacted) and why, within 10 s
(:data:`kftrain.tracking.env.BOUNDED_HTTP`): the variables say the run is to be tracked, and a training whose
curves and model were meant for the registry is better stopped at once than found untracked at the end. Once the
step is under way, a failed request is the caller's to report and go on from (:mod:`kftrain.tracking.training`).

No credential is ever printed: MLflow's client reads them from the environment, and every message goes through
:func:`describe`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kftrain.errors import KftrainError, redact_urls
from kftrain.extras import requires
from kftrain.tracking.env import TRACKING_URI, Tracking, bounded_http, tracking_from_env

log = logging.getLogger(__name__)

# MLflow's limits (mlflow/mlflow@v3.17.2:mlflow/utils/validation.py): a batch holds at most 1000 metrics and 100
# tags; a tag's value at most 8000 characters (MAX_TAG_VAL_LENGTH).
MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_TAG_VALUE = 8000
MAX_REASON = 300


class TrackingError(KftrainError):
    """The tracking server cannot be used: one line naming it and why."""


def describe(exc: BaseException) -> str:
    """The first line of ``exc``, without any URL's credentials, at most :data:`MAX_REASON` characters."""
    text = redact_urls((str(exc).strip().splitlines() or [type(exc).__name__])[0])
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def why_refused(exc: BaseException) -> str:
    """What an MLflow failure means for the user: unreachable, credentials refused, no such run, or else."""
    text = str(exc)
    code = getattr(exc, "error_code", "")
    if "401" in text or code == "UNAUTHENTICATED":
        return "refused the credentials (HTTP 401: check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD)"
    if "403" in text or code == "PERMISSION_DENIED":
        return "refused access to the run (HTTP 403: the credentials lack permission)"
    if code == "RESOURCE_DOES_NOT_EXIST":
        return "has no such run (MLFLOW_RUN_ID)"
    if "Connection refused" in text or "Max retries exceeded" in text or "timed out" in text.lower():
        return f"cannot be reached ({describe(exc)})"
    return describe(exc)


class TaskRun:
    """One task's run: tags, metrics and artifacts logged into it, and its place among the pipeline's runs."""

    def __init__(self, tracking: Tracking, client: Any) -> None:
        self.tracking = tracking
        self.client = client

    @property
    def run_id(self) -> str:
        return self.tracking.run_id

    def where(self) -> str:
        """The run, for the step's log: ``run <id> on <server>``."""
        return f"MLflow run {self.run_id} on {redact_urls(self.tracking.uri)}"

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(*args, **kwargs)``; a failure is a :class:`TrackingError` saying ``what`` failed."""
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as exc:  # MlflowException, or a transport error it did not wrap
            raise TrackingError(f"MLflow: could not {what} ({self.where()}): {why_refused(exc)}") from None

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags (values as text; a dict or list as JSON), in batches MLflow accepts."""
        from mlflow.entities import RunTag

        items = [RunTag(k, _text(v)[:MAX_TAG_VALUE]) for k, v in tags.items() if v is not None and v != ""]
        for start in range(0, len(items), MAX_TAGS_PER_BATCH):
            self.call("set tags", "log_batch", self.run_id, tags=items[start : start + MAX_TAGS_PER_BATCH])

    def log_metrics(self, points: Sequence[tuple[str, float, int]], timestamp_ms: int | None = None) -> None:
        """``(key, value, step)`` points (finite values only), in batches MLflow accepts."""
        from mlflow.entities import Metric

        now = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        items = [Metric(k, float(v), now, int(step)) for k, v, step in points if math.isfinite(v)]
        for start in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.call("log metrics", "log_batch", self.run_id, metrics=items[start : start + MAX_METRICS_PER_BATCH])

    def log_text(self, text: str, artifact_file: str) -> None:
        self.call(f"log {artifact_file}", "log_text", self.run_id, text, artifact_file)

    def log_json(self, data: Any, artifact_file: str) -> None:
        self.log_text(json.dumps(data, indent=1), artifact_file)

    def log_folder(self, local_dir: str, artifact_path: str) -> None:
        self.call(f"log {artifact_path}/", "log_artifacts", self.run_id, local_dir, artifact_path)

    def pipeline_run(self) -> tuple[str, dict[str, str]]:
        """The pipeline's run and its tags: the root of this run's ``mlflow.parentRunId`` chain (KFP nests a task
        under its DAG's run, that under the pipeline's: kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go,
        ApplyCustomProperties before each task's OnTaskStart). ``("", {})`` when this run has no parent."""
        run_id, seen = self.run_id, {self.run_id}
        tags: dict[str, str] = {}
        for _ in range(8):  # KFP's own walk stops at depth 4 (apiserver/plugins/mlflow/run_start.go, maxNestingDepth)
            tags = dict(self.call("read the pipeline's run", "get_run", run_id).data.tags)
            parent = tags.get(PARENT_TAG, "")
            if not parent or parent in seen:
                break
            seen.add(parent)
            run_id = parent
        return (run_id, tags) if run_id != self.run_id else ("", {})


PARENT_TAG = "mlflow.parentRunId"  # kubeflow/pipelines@2.17.0:backend/src/common/plugins/mlflow/client.go:67


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list | tuple) else str(value)


def open_task_run(tracking: Tracking, needed_by: str) -> TaskRun:
    """The task's run, checked to exist on a server that answers; else :class:`TrackingError` naming the server."""
    with requires("mlflow", needed_by):
        from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.uri)
    started = time.monotonic()
    try:
        client.get_run(tracking.run_id)
    except Exception as exc:  # MLflow wraps every transport failure in MlflowException; anything else is the same
        raise TrackingError(
            f"{TRACKING_URI}: the MLflow tracking server {redact_urls(tracking.uri)} {why_refused(exc)} "
            f"(after {time.monotonic() - started:.1f}s; run {tracking.run_id})"
        ) from None
    return TaskRun(tracking, client)


@contextlib.contextmanager
def task_run(needed_by: str) -> Iterator[TaskRun | None]:
    """The task's run when the step has the MLflow variables (:mod:`kftrain.tracking.env`), else None: no MLflow
    import, nothing logged. MLflow's HTTP retries are bounded within the block."""
    tracking = tracking_from_env()
    if tracking is None:
        yield None
        return
    with bounded_http():
        run = open_task_run(tracking, needed_by)
        log.info("logging to %s", run.where())
        yield run

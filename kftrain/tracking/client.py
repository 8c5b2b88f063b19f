"""The task's MLflow run, as a step logs into it: best-effort, as KFP's own MLflow calls are.

A server that is down, slow or refuses the credentials when the step starts is one warning naming it (credentials
redacted) and why, within :data:`~kftrain.tracking.calls.CALL_DEADLINE_S`, and the step goes on untracked. Once
under way, every request is best-effort (:class:`~kftrain.tracking.calls.Server`): a failure is a warning, never
the step's end; a point MLflow would refuse is left out alone, never its batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kftrain.errors import KftrainError
from kftrain.extras import requires
from kftrain.redaction import redact
from kftrain.tracking.calls import Refused, Server, TrackingError, describe, why_refused
from kftrain.tracking.env import (
    EXPERIMENT_ID,
    TRACKING_URI,
    Tracking,
    bounded_http,
    kfp_config,
    local_store,
    step_credentials,
    tracking_from_env,
    tracking_uri,
    unusable,
)

log = logging.getLogger(__name__)

__all__ = ["TaskRun", "TrackingError", "describe", "open_task_run", "task_run", "why_refused"]

# MLflow's limits (mlflow/mlflow@v3.17.2:mlflow/utils/validation.py): a batch holds at most 1000 metrics and 100
# tags; a tag's value at most 8000 characters (MAX_TAG_VAL_LENGTH); a step is a 64-bit integer (_validate_metric).
MAX_METRICS_PER_BATCH = 1000
MAX_TAGS_PER_BATCH = 100
MAX_TAG_VALUE = 8000
INT64 = (-(2**63), 2**63 - 1)
PARENT_TAG = "mlflow.parentRunId"  # kubeflow/pipelines@2.17.0:backend/src/common/plugins/mlflow/client.go:67
DEFAULT_EXPERIMENT = "KFP-Default"  # kubeflow/pipelines@2.17.0:backend/src/apiserver/plugins/mlflow/config.go:41
EXPERIMENT_NAME_ENV = "MLFLOW_EXPERIMENT_NAME"


def point_problem(key: str, value: float, step: int) -> str:
    """Why MLflow would refuse the point (and with it its whole batch), or "" (mlflow's own _validate_metric)."""
    from mlflow.utils.validation import _validate_metric

    if not INT64[0] <= step <= INT64[1]:
        return f"its step {step:.3g} is not a 64-bit integer"
    try:
        _validate_metric(key, value, 0, step)
    except Exception as exc:
        return describe(exc)
    return ""


class TaskRun:
    """One task's run: tags, metrics and artifacts logged into it, each best-effort (see the module's docstring)."""

    def __init__(self, tracking: Tracking, client: Any, server: Server | None = None) -> None:
        self.tracking = tracking
        self.client = client
        self.server = server or Server(self.where())
        self._left_out: set[str] = set()  # keys whose refused point was said

    @property
    def run_id(self) -> str:
        return self.tracking.run_id

    def where(self) -> str:
        """The run, for the step's log: ``MLflow run <id> on <server>``."""
        return f"MLflow run {self.run_id} on {redact(self.tracking.uri)}"

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(*args, **kwargs)`` within the deadline; a failure is a :class:`TrackingError`."""
        return self.server.call(what, getattr(self.client, method), *args, **kwargs)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags (values as text; a dict or list as JSON), in batches MLflow accepts."""
        from mlflow.entities import RunTag

        items = [RunTag(k, _text(v)[:MAX_TAG_VALUE]) for k, v in tags.items() if v is not None and v != ""]
        for start in range(0, len(items), MAX_TAGS_PER_BATCH):
            self.server.attempt(
                "set tags", self.client.log_batch, self.run_id, tags=items[start : start + MAX_TAGS_PER_BATCH]
            )

    def log_metrics(self, points: Sequence[tuple[str, float, int]], timestamp_ms: int | None = None) -> int:
        """``(key, value, step)`` points (finite values only), in batches MLflow accepts; a point MLflow would
        refuse is left out alone (said once per key). Returns how many were logged."""
        from mlflow.entities import Metric

        now = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        items = []
        for key, value, step in points:
            if not math.isfinite(value):
                continue
            problem = point_problem(key, float(value), int(step))
            if problem:
                self._leave_out(key, problem)
            else:
                items.append(Metric(key, float(value), now, int(step)))
        return sum(
            self._log_points(items[start : start + MAX_METRICS_PER_BATCH])
            for start in range(0, len(items), MAX_METRICS_PER_BATCH)
        )

    def _log_points(self, items: list[Any]) -> int:
        """Log ``items``; a batch the server refuses is halved until the refused points stand alone."""
        if not items:
            return 0
        was_down = bool(self.server.down)
        try:
            self.call("log metrics", "log_batch", self.run_id, metrics=items)
            return len(items)
        except Refused as exc:
            if len(items) == 1:
                self._leave_out(items[0].key, str(exc))
                return 0
            half = len(items) // 2
            return self._log_points(items[:half]) + self._log_points(items[half:])
        except TrackingError as exc:
            if not was_down:
                log.warning("%s; the step goes on without them", exc)
            return 0

    def _leave_out(self, key: str, why: str) -> None:
        if key not in self._left_out:
            self._left_out.add(key)
            log.warning("mlflow: left out a point of %r (%s): %s; the others are logged", key, self.where(), why)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.server.attempt(f"log {artifact_file}", self.client.log_text, self.run_id, text, artifact_file)

    def log_json(self, data: Any, artifact_file: str) -> None:
        self.log_text(json.dumps(data, indent=1), artifact_file)

    def pipeline_run(self) -> tuple[str, dict[str, str]]:
        """The pipeline's run and its tags: the root of this run's ``mlflow.parentRunId`` chain (KFP nests a task
        under its DAG's run, that under the pipeline's: kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go,
        ApplyCustomProperties before each task's OnTaskStart). ``("", {})`` when this run has no parent; a
        :class:`TrackingError` when the server fails."""
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


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list | tuple) else str(value)


def experiment_of(server: Server, client: Any) -> str:
    """The experiment a run of this process goes in: ``MLFLOW_EXPERIMENT_ID``, else KFP_MLFLOW_CONFIG's, else the
    one named ``MLFLOW_EXPERIMENT_NAME`` or ``KFP-Default`` (created when missing); a :class:`TrackingError`."""
    given = os.environ.get(EXPERIMENT_ID) or str(kfp_config().get("experimentId") or "")
    if given:
        return str(server.call("read the experiment", client.get_experiment, given).experiment_id)
    name = os.environ.get(EXPERIMENT_NAME_ENV) or DEFAULT_EXPERIMENT
    found = server.call("read the experiment", client.get_experiment_by_name, name)
    if found is not None:
        return str(found.experiment_id)
    return str(server.call("create the experiment", client.create_experiment, name))


def _make_run(server: Server, client: Any, tracking: Tracking, run_name: str) -> Tracking:
    """A run for this step, in its experiment, nested under KFP_MLFLOW_CONFIG's ``parentRunId`` when given."""
    parent = str(kfp_config().get("parentRunId") or "")
    experiment = experiment_of(server, client)
    tags = {PARENT_TAG: parent} if parent else None
    made = server.call("create the step's run", client.create_run, experiment, run_name=run_name or None, tags=tags)
    return Tracking(tracking.uri, str(made.info.run_id), experiment, tracking.workspace, owned=True)


def open_task_run(tracking: Tracking, run_name: str = "") -> TaskRun | None:
    """The task's run, checked to exist on a server that answers (or, given no run id, one made for this step
    under KFP_MLFLOW_CONFIG's ``parentRunId``); None and a warning naming the server and why when it cannot be."""
    from mlflow.tracking import MlflowClient

    local = local_store(tracking.uri)
    if local:
        unusable(tracking.run_id)
        log.warning("%s: %s; the step goes on untracked", TRACKING_URI, local)
        return None
    server = Server(f"MLflow run {tracking.run_id or '(new)'} on {redact(tracking.uri)}")
    started = time.monotonic()
    try:
        client = server.call("make the client", MlflowClient, tracking_uri=tracking.uri)
        if not tracking.run_id:
            tracking = server.bounded("make the step's run", _make_run, server, client, tracking, run_name)
            server.where = f"MLflow run {tracking.run_id} on {redact(tracking.uri)}"
        else:
            server.call("read the task's run", client.get_run, tracking.run_id)
    except TrackingError as exc:
        unusable(tracking.run_id)
        log.warning(
            "%s: the MLflow tracking server %s %s (after %.1fs; run %s); the step goes on untracked",
            TRACKING_URI,
            redact(tracking.uri),
            exc.why,
            time.monotonic() - started,
            tracking.run_id or "(new)",
        )
        return None
    return TaskRun(tracking, client, server)


@contextlib.contextmanager
def task_run(needed_by: str, uri: str = "", run_name: str = "") -> Iterator[TaskRun | None]:
    """The task's run when the step has the MLflow variables (:mod:`kftrain.tracking.env`) or is given ``uri``,
    else None: no MLflow import, nothing logged. MLflow's HTTP retries are bounded within the block; a run made
    for the step ends with the block, FINISHED or FAILED. A ``uri`` holding credentials is refused
    (:func:`~kftrain.tracking.env.tracking_uri`): the step fails before it makes anything."""
    tracking = tracking_from_env(uri=tracking_uri(uri))
    if tracking is None:
        yield None
        return
    try:
        with requires("mlflow", needed_by):
            import mlflow.tracking  # noqa: F401
    except KftrainError as exc:
        log.warning("%s; the step goes on untracked", exc)
        yield None
        return
    with bounded_http(), step_credentials(tracking.uri):
        run = open_task_run(tracking, run_name)
        if run is not None:
            log.info("logging to %s", run.where())
        status = "FAILED"
        try:
            yield run
            status = "FINISHED"
        finally:
            if run is not None and run.tracking.owned:
                run.server.attempt("end the step's run", run.client.set_terminated, run.run_id, status)

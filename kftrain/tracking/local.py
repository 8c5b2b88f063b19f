"""``kftrain run --mlflow URI`` (or ``MLFLOW_TRACKING_URI`` set): a local run's MLflow runs, laid out as KFP 2.17's
MLflow plugin lays out a pipeline run's (kubeflow/pipelines@2.17.0:backend/src/apiserver/plugins/mlflow/handler.go,
OnBeforeRunCreation; backend/src/v2/common/plugins/mlflow/handler.go, OnTaskStart, OnTaskEnd), so that every step
logs as it would on a cluster. KFP's local runner has no plugin hooks: the two calls it makes per task
(kfp==2.17.0: ``kfp/local/orchestrator/task_executor.py`` ``execute_single_task``,
``enhanced_dag_orchestrator.py`` ``execute_task``) are wrapped while the pipeline runs. As KFP's API server goes on
when MLflow fails, so does the run: every request is best-effort (:class:`kftrain.tracking.calls.Server`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kftrain.errors import JobSpecError, KftrainError
from kftrain.extras import requires
from kftrain.redaction import redact
from kftrain.tracking.calls import Server, TrackingError
from kftrain.tracking.client import PARENT_TAG, experiment_of, point_problem
from kftrain.tracking.env import EXPERIMENT_ID, RUN_ID, TRACKING_URI, WORKSPACE, bounded_http, local_store

log = logging.getLogger(__name__)

# mlflow/mlflow@v3.17.2:mlflow/utils/validation.py: MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH.
MAX_PARAM_VALUE = 6000
MAX_PARAMS_PER_BATCH = 100
SAY = "[kftrain] mlflow:"  # kftrain run's quiet output shows lines starting so

# The run of the DAG whose tasks are being run (None at the top: the pipeline's run).
_PARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("kftrain_mlflow_parent", default=None)


class LocalPipelineRuns:
    """The MLflow runs of one local pipeline run (see the module's docstring)."""

    def __init__(
        self, client: Any, uri: str, experiment_id: str, pipeline_root: Path, server: Server | None = None
    ) -> None:
        self.client = client
        self.uri = uri
        self.experiment_id = experiment_id
        self.pipeline_root = pipeline_root
        self.run_id = ""  # the pipeline's run, made when its first task starts (KFP names the run folder then)
        self._lock = threading.Lock()
        self.server = server or pipeline_server(uri)

    # -- the pipeline's run -----------------------------------------------------------------------

    def pipeline_run(self, resource_name: str) -> str:
        """The pipeline's run, created on first use: named after the run's folder (``resource_name``)."""
        with self._lock:
            if not self.run_id:
                root = resource_name.split("/", 1)[0]  # a ParallelFor iteration's DAG adds "/<iteration>"
                folder = (self.pipeline_root / root).resolve()
                tags = {"kfp.pipeline_run_id": root, "kfp.pipeline_run_url": folder.as_uri()}
                made = self.server.call(
                    "create the pipeline's run", self.client.create_run, self.experiment_id, run_name=root, tags=tags
                )
                self.run_id = made.info.run_id
                page = self.ui_url(self.run_id)
                print(f"{SAY} pipeline run {self.run_id}" + (f": {page}" if page else ""), flush=True)
            return self.run_id

    def ui_url(self, run_id: str) -> str:
        """The run's page in the MLflow UI, as KFP links it (run_start.go, BuildRunURL); "" for a store that is
        no server."""
        base = redact(self.uri).rstrip("/")
        return f"{base}/#/experiments/{self.experiment_id}/runs/{run_id}" if base.startswith("http") else ""

    def end(self, status: str) -> None:
        if self.run_id:
            self.server.attempt("end the pipeline's run", self.client.set_terminated, self.run_id, status)

    # -- a task's run -----------------------------------------------------------------------------

    def start_task(self, name: str, resource_name: str) -> str:
        """A nested run for the task ``name``, under the DAG being run; "" when it could not be made."""
        was_down = bool(self.server.down)
        try:
            parent = _PARENT.get() or self.pipeline_run(resource_name)
            run = self.server.call(
                f"create task {name}'s run",
                self.client.create_run,
                self.experiment_id,
                run_name=name,
                tags={PARENT_TAG: parent},
            )
        except TrackingError as exc:
            if not was_down:
                self.server.say(f"{exc}; {self.server.goes_on}")
            return ""
        return str(run.info.run_id)

    def end_task(self, run_id: str, status: str, outputs: Mapping[str, Any], params: Mapping[str, Any]) -> None:
        """What KFP's launcher logs when a task ends: its Metrics' scalars, its input parameters, its status."""
        if not run_id:
            return
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in _scalar_metrics(outputs).items() if not point_problem(k, v, 0)]
        values = [Param(k, _param_text(v)) for k, v in params.items()]
        if metrics:
            self.server.attempt("log a task's metrics", self.client.log_batch, run_id, metrics=metrics)
        for start in range(0, len(values), MAX_PARAMS_PER_BATCH):  # KFP sends one batch; MLflow takes 100 a batch
            batch = values[start : start + MAX_PARAMS_PER_BATCH]
            self.server.attempt("log a task's params", self.client.log_batch, run_id, params=batch)
        self.server.attempt("end a task's run", self.client.set_terminated, run_id, status)

    def task_env(self, run_id: str) -> dict[str, str]:
        """The variables the task's container gets (RetrieveUserContainerEnvVars)."""
        env = {RUN_ID: run_id, TRACKING_URI: self.uri, EXPERIMENT_ID: self.experiment_id}
        if os.environ.get(WORKSPACE):
            env[WORKSPACE] = os.environ[WORKSPACE]
        return env


def pipeline_server(uri: str) -> Server:
    """The tracking server of a local run: its warnings are lines of ``kftrain run``'s quiet output."""
    return Server(redact(uri), goes_on="the pipeline goes on", say=lambda text: print(f"{SAY} {text}", flush=True))


def _scalar_metrics(outputs: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a task's KFP Metrics outputs (v2/metadata/client.go, FormatScalarMetricArtifacts)."""
    from kfp import dsl

    found: dict[str, float] = {}
    for value in outputs.values():
        if isinstance(value, dsl.Metrics):
            for key, number in (value.metadata or {}).items():
                if key != "display_name" and isinstance(number, int | float) and not isinstance(number, bool):
                    found[key] = float(number)
    return found


# What Go's encoding/json escapes that Python's json leaves as it is (golang/go@go1.24.0:src/encoding/json/encode.go,
# appendString: HTML-safe by default, and the two JavaScript line terminators).
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _param_text(value: Any) -> str:
    """A parameter as KFP's launcher logs it: the value as protobuf's Struct holds it (every number a float64)
    marshalled by Go's json.Marshal (handler.go, mapToParams): compact, keys sorted, a whole number without ``.0``
    (encode.go, floatEncoder: 'f' format below 1e21), non-ASCII as it is; cut to what MLflow accepts."""
    text = json.dumps(_go_numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    for char, escaped in _GO_ESCAPES.items():
        text = text.replace(char, escaped)
    return text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."


def _go_numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_go_numbers(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def _status(ok: bool) -> str:
    return "FINISHED" if ok else "FAILED"


def _task_params(task_spec: Any, io_store: Any, component: Any) -> dict[str, Any]:
    """The task's input parameters, defaults included, as KFP's execution records them (FormatExecutionParameters)."""
    from kfp.local.orchestrator.orchestrator_utils import OrchestratorUtils

    try:
        given = OrchestratorUtils.make_task_arguments(task_inputs_spec=task_spec.inputs, io_store=io_store)
    except Exception:  # an input the runner resolves differently (a loop item): left out, as is
        given = {}
    params: dict[str, Any] = {}
    for name, spec in component.input_definitions.parameters.items():
        if name in given:
            params[name] = given[name]
        elif spec.HasField("default_value"):
            from kfp.local import executor_output_utils

            params[name] = executor_output_utils.pb2_value_to_python(spec.default_value)
    return params


def _with_env(executors: Mapping[str, Any], label: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``executors`` with ``label``'s container given ``env`` (a copy: the pipeline's spec is left as it is)."""
    spec = type(executors[label])()
    spec.CopyFrom(executors[label])
    for name, value in env.items():
        spec.container.env.add(name=name, value=value)
    return {**executors, label: spec}


def _ended(
    runs: LocalPipelineRuns, run_id: str, component: Any, kwargs: dict[str, Any], run: Any, *, outputs_logged: bool
) -> Any:
    """``run(**kwargs)`` (KFP's own execution of a task or a DAG), its nested run then ended as KFP's launcher ends
    it: FINISHED, FAILED, or KILLED when interrupted; the task's outputs logged when ``outputs_logged``."""
    from kfp.local import status as kfp_status

    status, outputs = "KILLED", {}
    try:
        outputs, run_status = run(**kwargs)
        status = _status(run_status == kfp_status.Status.SUCCESS)
        return outputs, run_status
    except Exception:
        status = "FAILED"
        raise
    finally:
        logged = outputs if outputs_logged else {}
        runs.end_task(run_id, status, logged, _task_params(kwargs["task_spec"], kwargs["io_store"], component))


@contextlib.contextmanager
def wrapped_runner(runs: LocalPipelineRuns) -> Iterator[None]:
    """KFP's local runner with every task and DAG task given its nested run, while the block runs."""
    from kfp.local.orchestrator import enhanced_dag_orchestrator, task_executor

    run_task = task_executor.execute_single_task
    run_any = enhanced_dag_orchestrator.execute_task

    def container_task(**kwargs: Any) -> Any:
        component = kwargs["components"][kwargs["task_spec"].component_ref.name]
        run_id = runs.start_task(kwargs["task_name"], kwargs["pipeline_resource_name"])
        executors = kwargs["executors"]
        if run_id and executors[component.executor_label].WhichOneof("spec") == "container":
            kwargs["executors"] = _with_env(executors, component.executor_label, runs.task_env(run_id))
        return _ended(runs, run_id, component, kwargs, run_task, outputs_logged=True)

    def any_task(**kwargs: Any) -> Any:
        component = kwargs["components"][kwargs["task_spec"].component_ref.name]
        if component.WhichOneof("implementation") != "dag":
            return run_any(**kwargs)
        run_id = runs.start_task(kwargs["task_name"], kwargs["pipeline_resource_name"])
        token = _PARENT.set(run_id or _PARENT.get())
        try:
            return _ended(runs, run_id, component, kwargs, run_any, outputs_logged=False)
        finally:
            _PARENT.reset(token)

    task_executor.execute_single_task = container_task
    enhanced_dag_orchestrator.execute_task = any_task
    try:
        yield
    finally:
        task_executor.execute_single_task = run_task
        enhanced_dag_orchestrator.execute_task = run_any


def open_experiment(uri: str) -> tuple[Any, str, Server] | None:
    """An MLflow client of ``uri``, the experiment the pipeline's run goes in (created when missing) and the server,
    checked in bounded time; None, said in one line, when the server cannot be used: the run goes on untracked."""
    server = pipeline_server(uri)
    try:
        with requires("mlflow", f"tracking the run in MLflow (--mlflow, {TRACKING_URI})"):
            from mlflow.tracking import MlflowClient
    except KftrainError as exc:
        server.say(f"{exc}; the pipeline goes on untracked")
        return None
    started = time.monotonic()
    try:
        client = server.call("make the client", MlflowClient, tracking_uri=uri)
        return client, server.bounded("open the experiment", experiment_of, server, client), server
    except TrackingError as exc:
        server.say(
            f"{TRACKING_URI}: the MLflow tracking server {redact(uri)} {exc.why} "
            f"(after {time.monotonic() - started:.1f}s); the pipeline goes on untracked"
        )
        return None


@contextlib.contextmanager
def tracked_pipeline(
    pipeline_root: str | Path, uri: str = "", register_model: str = "", steps_uri: str = ""
) -> Iterator[LocalPipelineRuns | None]:
    """Within the block, a local pipeline run is tracked in MLflow on the server ``uri`` (``--mlflow``), else
    ``MLFLOW_TRACKING_URI``'s (None and nothing done without either, or when the server cannot be used). The
    pipeline's run ends FINISHED, FAILED or KILLED with the block. A ``register_model`` without tracking (neither
    of those nor ``steps_uri``, the pipeline's ``mlflow_tracking_uri`` parameter) is refused before any step runs."""
    given = bool(uri.strip())
    uri = uri.strip() or os.environ.get(TRACKING_URI, "").strip()
    if register_model and not uri and not steps_uri.strip():
        raise JobSpecError(
            "register_model",
            f"{register_model!r}: registering needs MLflow tracking: pass --mlflow URI, set {TRACKING_URI} or "
            "the pipeline's mlflow_tracking_uri parameter",
        )
    if not uri:
        yield None
        return
    if local_store(uri):
        raise JobSpecError("--mlflow" if given else TRACKING_URI, local_store(uri))
    with bounded_http():
        opened = open_experiment(uri)
        if opened is None:
            yield None
            return
        client, experiment_id, server = opened
        runs = LocalPipelineRuns(client, uri, experiment_id, Path(pipeline_root), server)
        status = "KILLED"
        try:
            with wrapped_runner(runs):
                yield runs
            status = "FINISHED"
        except Exception:
            status = "FAILED"
            raise
        finally:
            runs.end(status)

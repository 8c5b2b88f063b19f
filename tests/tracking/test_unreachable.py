"""A tracking server that is down, never answers, refuses the credentials, throttles with ``Retry-After: 3600``,
answers 500 or trickles its answer a byte every 2 s is one warning within 10 s, naming the server and why, and the
step (or a local pipeline run) goes on untracked: the job is created, the model written, nothing printed of the
token; a server that fails once the step is under way costs its tracking only, never the step's verdict or export.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from kftrain.tracking.client import TaskRun, task_run
from kftrain.tracking.env import Tracking, replica_env
from kftrain.tracking.evaluation import log_evaluation
from kftrain.tracking.export import register_export
from kftrain.tracking.local import tracked_pipeline
from testbed.fixtures import CANARY
from testbed.mlflow_server import hostile_server
from testbed.needs import requires
from testbed.ports import refusing_url

pytestmark = requires("mlflow", reason="kftrain's [mlflow] extra (make install)")
LIMIT_S = 10.0


@contextlib.contextmanager
def never_answers() -> Iterator[str]:
    """A socket that listens and never accepts: a connection completes in the kernel, no answer ever comes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


SERVERS: dict[str, tuple[Callable[[], Any], str]] = {
    "down": (refusing_url, "cannot be reached"),
    "silent": (never_answers, "cannot be reached"),  # two reads of 3 s each (BOUNDED_HTTP)
    "refuses credentials": (lambda: hostile_server("401"), "refused the credentials (HTTP 401"),
    "503 Retry-After 3600": (lambda: hostile_server("retry-after"), "cannot be reached"),
    "429 Retry-After 3600": (lambda: hostile_server("throttles"), "cannot be reached"),
    "500": (lambda: hostile_server("500"), "cannot be reached"),
    "a byte every 2 s": (lambda: hostile_server("silent-body"), "did not answer in time"),
}


def kftrain_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What kftrain warned (urllib3 says its own "Retrying ..." too)."""
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("kftrain")]


@pytest.mark.parametrize("failure", list(SERVERS))
def test_a_step_goes_on_untracked_within_10s_with_one_warning(failure, monkeypatch, caplog):
    server, why = SERVERS[failure]
    with server() as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("MLFLOW_RUN_ID", f"run-{failure.replace(' ', '-')}")
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", CANARY + "\n")  # as read from a Secret
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), task_run("a test") as run:
            took = time.monotonic() - started
            assert run is None
            assert replica_env() == []  # a program's own mlflow calls would wait on that server in turn
    warnings = kftrain_warnings(caplog)
    assert took < LIMIT_S, took
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"MLFLOW_TRACKING_URI: the MLflow tracking server {uri} {why}"), warnings
    assert warnings[0].endswith("the step goes on untracked") and CANARY not in caplog.text


@pytest.mark.parametrize("failure", ["down", "503 Retry-After 3600"])
def test_the_launch_step_trains_and_keeps_its_model_when_the_server_fails(
    failure, tmp_path, monkeypatch, capfd, caplog, no_leftover_processes
):
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch

    server, _ = SERVERS[failure]
    program = (
        "import os; m = os.environ['KFTRAIN_MODEL_URI']; os.makedirs(m, exist_ok=True); "
        "open(os.path.join(m, 'w'), 'w').write('w')"
    )
    with server() as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("MLFLOW_RUN_ID", "4c0ffee")
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", CANARY)
        model = call_launch(pytorchjob_launch, tmp_path, backend="local", command=["python", "-c", program])
    printed = capfd.readouterr()
    assert (tmp_path / "model" / "w").exists() and model.metadata  # the model was written and described
    assert any("the step goes on untracked" in w for w in kftrain_warnings(caplog))
    assert CANARY not in printed.err + printed.out + caplog.text


@pytest.mark.parametrize("failure", ["down", "503 Retry-After 3600", "a byte every 2 s"])
def test_a_local_pipeline_run_goes_on_untracked_within_10s(failure, tmp_path, monkeypatch, capsys):
    server, _ = SERVERS[failure]
    ran = False
    with server() as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        started = time.monotonic()
        with tracked_pipeline(tmp_path) as runs:
            took = time.monotonic() - started
            ran = runs is None
    out = capsys.readouterr().out
    assert ran and took < LIMIT_S, took
    assert out.startswith("[kftrain] mlflow: MLFLOW_TRACKING_URI: the MLflow tracking server") and out.count("\n") == 1
    assert "the pipeline goes on untracked" in out


def test_register_model_without_tracking_is_refused_before_any_step(tmp_path, monkeypatch):
    from kftrain.errors import JobSpecError

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with (
        pytest.raises(JobSpecError, match="registering needs MLflow tracking"),
        tracked_pipeline(tmp_path, register_model="digits"),
    ):
        pytest.fail("a step ran")


def test_register_model_with_the_steps_tracking_uri_is_not_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ran = False
    with tracked_pipeline(tmp_path, register_model="digits", steps_uri="http://127.0.0.1:5000") as runs:
        ran = True
    assert ran and runs is None  # the steps track themselves; the local pipeline run is not tracked


def _evaluation() -> tuple[Any, Any]:
    evaluation = SimpleNamespace(
        metrics={"accuracy": 0.9},
        rows=10,
        split="test",
        task="classification",
        model_format="torch",
        confusion=[[1, 0], [0, 1]],
        classes=["a", "b"],
        per_class={},
        roc=None,
        precision_recall=None,
        residual_sample=[],
    )
    decision = SimpleNamespace(metric="accuracy", score=0.9, passed=True, reason="0.9 >= 0.8")
    return evaluation, decision


def test_a_server_failing_after_the_work_is_done_costs_the_tracking_only(tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    with hostile_server("500") as uri, caplog.at_level(logging.WARNING):
        run = TaskRun(Tracking(uri, "r1"), MlflowClient(tracking_uri=uri))
        started = time.monotonic()
        evaluation, decision = _evaluation()
        log_evaluation(run, evaluation, decision, markdown="# report", html="<p>report</p>")
        version = register_export(run, "digits", str(tmp_path / "exported"), gate_passed=True)
        took = time.monotonic() - started
    warnings = kftrain_warnings(caplog)
    assert version == "" and took < LIMIT_S, took
    assert warnings[0].startswith(f"MLflow: could not log metrics (MLflow run r1 on {uri})"), warnings
    assert "not registered" in warnings[-1] and len(warnings) == 2, warnings


@pytest.mark.parametrize("uri", ["file://{tmp}/mlruns", "sqlite:///{tmp}/mlflow.db", "{tmp}/mlruns"])
def test_a_local_store_as_the_tracking_uri_is_one_line_and_nothing_is_written(uri, tmp_path, monkeypatch, caplog):
    from kftrain.errors import JobSpecError

    uri = uri.format(tmp=tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", "run-1")
    with caplog.at_level(logging.WARNING), task_run("a test") as run:  # the launch step: untracked, said once
        assert run is None
    (warning,) = kftrain_warnings(caplog)
    assert warning.startswith(f"MLFLOW_TRACKING_URI: {uri!r} is ") and warning.endswith("the step goes on untracked")
    assert replica_env() == []
    with (  # kftrain run: refused
        pytest.raises(JobSpecError, match=r"^--mlflow: .* on this machine's disk"),
        tracked_pipeline(tmp_path / "root", uri),
    ):
        pytest.fail("a step ran")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("HTTPConnectionPool(host='127.0.0.1', port=40153): 503 Service Unavailable", "cannot be reached"),
        ("API request to http://127.0.0.1:42403/api/2.0 failed: too many 429 error responses", "too many 429"),
        ("API request failed with error code 401 != 200", "refused the credentials"),
        ("Response: 403 Forbidden", "refused access to the run"),
    ],
    ids=["port-40153", "port-42403", "401", "403"],
)
def test_a_status_is_read_as_a_number_of_its_own_never_inside_a_port(message: str, expected: str) -> None:
    from kftrain.tracking.calls import why_refused

    assert expected in why_refused(Exception(message + " Max retries exceeded"))

"""One bad point costs that point only: a metric MLflow refuses (``a/../b``, a step of ``1e300``) is left out
alone, said once, and the rest of its batch (``loss`` included) is logged; a batch the server refuses for a
reason of its own is halved until the refused point stands alone. And a step given a tracking URI as an input,
without KFP's ``MLFLOW_RUN_ID``, makes a run of its own under KFP's pipeline run and ends it."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from kftrain.tracking.client import TaskRun, task_run
from kftrain.tracking.env import Tracking
from testbed.needs import requires

pytestmark = requires("mlflow", reason="kftrain's [mlflow] extra (make install)")


class Client:
    """MLflow's client as far as a step uses it; a batch holding a key in ``refuses`` is refused whole, as
    MLflow's server refuses one (mlflow/mlflow@v3.17.2:mlflow/server/handlers.py, _log_batch validates every
    item before it stores any)."""

    def __init__(self, refuses: frozenset[str] = frozenset()) -> None:
        self.logged: list[tuple[str, float, int]] = []
        self.batches = 0
        self.refuses = refuses
        self.created: list[dict[str, Any]] = []
        self.ended: list[tuple[str, str]] = []

    def log_batch(self, run_id: str, metrics: Any = (), tags: Any = ()) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
        from mlflow.utils.validation import _validate_metric

        self.batches += 1
        if any(m.key in self.refuses for m in metrics):
            raise MlflowException("Invalid metric name", error_code=INVALID_PARAMETER_VALUE)
        for m in metrics:  # the server's own checks; a step is a protobuf int64
            _validate_metric(m.key, m.value, m.timestamp, m.step)
            if not -(2**63) <= m.step < 2**63:
                raise MlflowException("step out of range", error_code=INVALID_PARAMETER_VALUE)
        self.logged.extend((m.key, m.value, m.step) for m in metrics)

    def get_experiment(self, experiment_id: str) -> Any:
        return SimpleNamespace(experiment_id=experiment_id)

    def create_run(self, experiment_id: str, run_name: str | None = None, tags: Any = None) -> Any:
        self.created.append({"experiment_id": experiment_id, "run_name": run_name, "tags": tags})
        return SimpleNamespace(info=SimpleNamespace(run_id="made-1"))

    def set_terminated(self, run_id: str, status: str) -> None:
        self.ended.append((run_id, status))


def test_a_bad_point_is_left_out_alone_and_the_batch_is_logged(caplog):
    client = Client()
    run = TaskRun(Tracking("http://mlflow:5000", "r"), client)
    points = [("loss", 0.5, 1), ("a/../b", 1.0, 1), ("loss", 0.4, int(1e300)), ("loss", 0.3, 2), ("a/../b", 2.0, 2)]
    with caplog.at_level(logging.WARNING):
        logged = run.log_metrics(points)
    assert client.logged == [("loss", 0.5, 1), ("loss", 0.3, 2)] and logged == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # once per key
    assert "'a/../b'" in warnings[0] and "64-bit integer" in warnings[1]


def test_a_batch_the_server_refuses_is_halved_until_the_refused_point_stands_alone():
    client = Client(refuses=frozenset({"refused-by-the-server"}))
    run = TaskRun(Tracking("http://mlflow:5000", "r"), client)
    points = [(f"m{i}", float(i), 1) for i in range(15)] + [("refused-by-the-server", 1.0, 1)]
    assert run.log_metrics(points) == 15
    assert sorted(client.logged) == sorted(points[:15]) and client.batches <= 2 * 4 + 1
    assert run.server.down == ""  # a refusal says nothing of the server: the next request goes


def test_a_tracking_uri_input_makes_a_run_under_kfps_pipeline_run_and_ends_it(monkeypatch):
    client = Client()
    monkeypatch.setattr("mlflow.tracking.MlflowClient", lambda tracking_uri: client)
    for name in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFP_MLFLOW_CONFIG", json.dumps({"experimentId": "7", "parentRunId": "pipeline-run"}))
    with task_run("a test", uri="http://mlflow:5000", run_name="pytorchjob-launch") as run:
        assert run is not None and run.run_id == "made-1" and run.tracking.owned
    assert client.created == [
        {"experiment_id": "7", "run_name": "pytorchjob-launch", "tags": {"mlflow.parentRunId": "pipeline-run"}}
    ]
    assert client.ended == [("made-1", "FINISHED")]
    with pytest.raises(RuntimeError), task_run("a test", uri="http://mlflow:5000") as run:
        raise RuntimeError("the step failed")
    assert client.ended[-1] == ("made-1", "FAILED")

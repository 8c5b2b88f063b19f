"""How the launch step names and steps the points it logs to MLflow, from the collector that reads the replicas'
lines: the chief's curves as ``curves/<name>``, another replica's as ``curves/<name>.<replica>``, the Trainer's
status under its names; the step is the x-axis when it is whole; never a curve under a final value's name (KFP logs
those at step 0); the final values only into a run the step made itself; and a server that fails mid-training is
said once while the job goes on."""

from __future__ import annotations

import logging
from typing import Any

from kftrain.metrics.collect import Collector
from kftrain.tracking.env import Tracking
from kftrain.tracking.training import TrainingTracker, logged_points


class FakeRun:
    """A TaskRun that records what it is asked to log (``fail``: every call raises, as a server down does)."""

    def __init__(self, fail: bool = False, owned: bool = False) -> None:
        self.points: list[tuple[str, float, int]] = []
        self.tags: dict[str, Any] = {}
        self.fail = fail
        self.tracking = Tracking("http://mlflow:5000", "r", owned=owned)

    def log_metrics(self, points: list[tuple[str, float, int]]) -> int:
        if self.fail:
            raise ConnectionError("API request to http://mlflow:5000 failed: Connection refused")
        self.points.extend(points)
        return len(points)

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.tags.update(tags)

    def where(self) -> str:
        return "MLflow run r on http://mlflow:5000"


def line(**point: float) -> str:
    import json

    return "KFTRAIN_METRICS " + json.dumps(point)


def test_names_and_steps_of_the_logged_points():
    run = FakeRun()
    collector = Collector()
    with logged_points(run, collector):  # type: ignore[arg-type]
        collector.feed("master-0", 'KFTRAIN_METRICS_TOTAL {"epoch": 2}')  # a total is no point
        collector.feed("master-0", line(epoch=1, loss=0.5))
        collector.feed("worker-0", line(epoch=1, loss=0.6))
        collector.feed("master-0", line(epoch=1.5, loss=0.4))  # not a whole epoch: its rank in the series
        collector.feed("master-0", "an ordinary log line")
        collector.feed_status({"progressPercentage": 50, "metrics": [{"name": "loss", "value": "0.45"}]})
        collector.feed_status({"progressPercentage": 50, "metrics": [{"name": "loss", "value": "0.45"}]})  # same
    assert run.points == [
        ("curves/loss", 0.5, 1),
        ("curves/loss.worker-0", 0.6, 1),
        ("curves/loss", 0.4, 1),
        ("curves/loss.trainer-status", 0.45, 0),
        ("curves/progress_percentage", 50.0, 0),
    ]
    assert run.tags == {"kftrain.job.outcome": "succeeded"}
    finals = collector.final_values()  # the Metrics output: KFP's launcher logs each at step 0 when the task ends
    assert finals and not {key for key, _, _ in run.points} & set(finals)


def test_the_final_values_go_only_into_a_run_the_step_made():
    for owned, expected in ((False, []), (True, [("loss", 0.2, 0), ("loss.worker-0", 0.3, 0)])):
        run = FakeRun(owned=owned)
        tracker = TrainingTracker(run)  # type: ignore[arg-type]
        tracker.point("master-0", {"step": 10, "loss": 0.2})
        tracker.close({"loss": 0.2, "loss.worker-0": 0.3, "step": 10})
        assert run.points == [("curves/loss", 0.2, 10), *expected]


def test_a_server_failing_mid_training_is_said_once_and_the_job_goes_on(caplog):
    run = FakeRun(fail=True)
    collector = Collector()
    with caplog.at_level(logging.WARNING), logged_points(run, collector):  # type: ignore[arg-type]
        for epoch in range(1, 4):
            collector.feed("master-0", line(epoch=epoch, loss=1 / epoch))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Connection refused" in warnings[0] and "the job goes on" in warnings[0]


def test_a_failing_job_is_tagged_failed_with_its_points_kept():
    run = FakeRun()
    collector = Collector()
    try:
        with logged_points(run, collector):  # type: ignore[arg-type]
            collector.feed("master-0", line(epoch=1, loss=0.5))
            raise RuntimeError("the job failed")
    except RuntimeError:
        pass
    assert run.points == [("curves/loss", 0.5, 1)] and run.tags == {"kftrain.job.outcome": "failed"}

"""Issue 52, class 7: tracking losses (kftrain/tracking/calls.py, client.py, evaluation.py): a training replica's
metric lines holding a metric named ``a/../b`` and a point at step ``1e300`` beside ``loss``, logged by the launch
step into a real tracking server (every other point must be there); the evaluation step when the server, once its
run is opened, answers 500 to every write (the verdict and the reports must still be written, with a warning).

The tracking server is testbed/mlflow_server.py's ``mlflow_server`` and its KFP task run (``kfp_task_run``); the
model and dataset of the evaluation are testbed/hostile/areas/evaluation.py's.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from testbed.hostile.case import FINE, LOSS, WRONG, Case, Observed, Sandbox
from testbed.http_answer import send_body, serving

AREA = "tracking"
NEEDS = ("mlflow", "torch", "pyarrow")
# A chief that reports three epochs, one point at step 1e300 and one metric named a/../b, then writes its model.
PROGRAM = """
import json, os
if os.environ["RANK"] == "0":
    print('KFTRAIN_METRICS_TOTAL {"epoch": 3}', flush=True)
    for point in ({"epoch": 1, "loss": 0.5, "a/../b": 1.0}, {"epoch": 1e300, "loss": 0.45}, {"epoch": 2, "loss": 0.4},
                  {"epoch": 3, "loss": 0.3, "a/../b": 2.0}):
        print("KFTRAIN_METRICS " + json.dumps(point), flush=True)
    model = os.environ["KFTRAIN_MODEL_URI"]
    os.makedirs(model, exist_ok=True)
    open(os.path.join(model, "weights.txt"), "w").write("w")
"""


def _bad_points(sb: Sandbox) -> None:
    import os

    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch
    from testbed.mlflow_server import kfp_task_run, mlflow_server

    with mlflow_server(sb.tmp / "mlflow") as server:
        env = kfp_task_run(server.client(), server.uri, "pytorchjob-launch")
        os.environ.update(env)
        sb.ready()
        call_launch(pytorchjob_launch, sb.work, backend="local", command=["python", "-c", PROGRAM])
        history = server.client().get_metric_history(env["MLFLOW_RUN_ID"], "curves/loss")
    steps = sorted(int(m.step) for m in history)
    if steps != [1, 2, 3]:
        raise Observed(LOSS, f"curves/loss was logged at steps {steps}, not [1, 2, 3]")


@contextlib.contextmanager
def _writes_fail(upstream: str) -> Iterator[str]:
    """A proxy of ``upstream`` that forwards every read (GET) and answers 500 to every write: a server that starts
    failing once the step's run is opened."""

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                with urllib.request.urlopen(upstream + self.path, timeout=10) as answer:
                    status, body = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            self._send(status, body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(500, json.dumps({"error_code": "INTERNAL_ERROR", "message": "stand-in"}).encode())

        do_PATCH = do_PUT = do_DELETE = do_POST

        def _send(self, status: int, body: bytes) -> None:
            send_body(self, status, "application/json", body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Proxy) as url:
        yield url


def _evaluation_after_500(sb: Sandbox) -> None:
    import os
    from types import SimpleNamespace

    from kftrain.steps.evaluate.component import evaluate_component
    from testbed.hostile.areas.evaluation import _prepared, _tests
    from testbed.mlflow_server import kfp_task_run, mlflow_server
    from testbed.step_calls import artifact

    dataset = _prepared(sb, ("a", "b"))
    _tests()._model_of_one_feature(sb.work, "model", [-10, 10], [5, -5], ["a", "b"])
    with mlflow_server(sb.tmp / "mlflow") as server, _writes_fail(server.uri) as failing:
        env = kfp_task_run(server.client(), server.uri, "evaluate-model")
        os.environ.update({**env, "MLFLOW_TRACKING_URI": failing})
        sb.ready()
        logged: dict[str, float] = {}
        metrics = SimpleNamespace(uri=str(sb.work / "m"), metadata={}, log_metric=logged.__setitem__)
        matrix = SimpleNamespace(uri=str(sb.work / "c"), metadata={}, log_confusion_matrix=lambda *a: None)
        passed, _ = evaluate_component(
            model=artifact(sb.work, "model"),
            dataset_uri=dataset,
            metrics=metrics,
            classification_metrics=matrix,
            report=artifact(sb.work, "r.md"),
            html_report=artifact(sb.work, "r.html"),
            split="test",
            gate_metric="accuracy",
            gate_threshold=0.9,
            baseline_model_uri="",
            batch_rows=10,
        )
    if not (
        passed and "accuracy" in logged and Path(sb.work / "r.md").is_file() and Path(sb.work / "r.html").is_file()
    ):
        raise Observed(WRONG, f"after a tracking failure: passed {passed}, metrics {sorted(logged)}, reports missing")


CASES: list[Case] = [
    Case(
        AREA,
        "a metric named a/../b and a point at step 1e300 beside loss",
        FINE,
        "pytorchjob_launch (local backend, a real tracking server)",
        _bad_points,
        timeout_s=240,
        needs=NEEDS,
    ),
    Case(
        AREA,
        "evaluation when the server answers 500 once its run is opened",
        FINE,
        "evaluate_model (a tracking server whose writes fail)",
        _evaluation_after_500,
        timeout_s=240,
        needs=NEEDS,
    ),
]

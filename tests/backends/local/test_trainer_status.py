"""Kubeflow Trainer's status server as the local backend serves it, and the one collector its reports feed.

Each rule cites kubeflow/trainer@v2.3.0: ``pkg/statusserver/server.go`` (answers), ``pkg/statusserver/middleware.go``
(body size), ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (what the API server accepts in trainerStatus).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.local.status_server import StatusServer, check_trainer_status
from kftrain.metrics.collect import Collector

NOW = "2026-11-26T10:00:00Z"

# (id, trainerStatus, the problem named; None: accepted)
RULES = [
    ("complete", {"progressPercentage": 45, "estimatedRemainingSeconds": 10, "lastUpdatedTime": NOW}, None),
    ("lastUpdatedTime required (trainjob_types.go:562)", {"progressPercentage": 1}, "lastUpdatedTime is required"),
    ("progress <= 100 (:568-569)", {"progressPercentage": 101, "lastUpdatedTime": NOW}, "progressPercentage"),
    ("progress >= 0 (:568)", {"progressPercentage": -1, "lastUpdatedTime": NOW}, "progressPercentage"),
    ("progress is an integer (:571)", {"progressPercentage": 4.5, "lastUpdatedTime": NOW}, "progressPercentage"),
    ("eta >= 0 (:577)", {"estimatedRemainingSeconds": -3, "lastUpdatedTime": NOW}, "estimatedRemainingSeconds"),
    (
        "a metric value is a string (:602-604)",
        {"metrics": [{"name": "loss", "value": 0.5}], "lastUpdatedTime": NOW},
        "metrics[0].value",
    ),
    (
        "a metric name has 1-64 characters (:596-598)",
        {"metrics": [{"name": "x" * 65, "value": "1"}], "lastUpdatedTime": NOW},
        "metrics[0].name",
    ),
    (
        "at most 256 metrics (:583)",
        {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)], "lastUpdatedTime": NOW},
        "at most 256",
    ),
]


@pytest.mark.parametrize(("status", "problem"), [c[1:] for c in RULES], ids=[c[0] for c in RULES])
def test_what_the_api_server_accepts_in_trainer_status(status, problem):
    found = check_trainer_status(status)
    assert (found is None) if problem is None else (problem in str(found)), found


@pytest.fixture
def server(tmp_path: Path):
    seen: list[Any] = []
    status_server = StatusServer("team", "job-1", tmp_path / "status", seen.append)
    endpoint = status_server.start()
    yield endpoint, seen
    status_server.stop()


def _post(endpoint: Any, body: bytes, token: str | None = None, url: str | None = None) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=endpoint.ca_cert)  # the CA the node is given verifies the server
    bearer = Path(endpoint.token).read_text() if token is None else token
    request = urllib.request.Request(url or endpoint.url, data=body, headers={"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# (id, body, token (None: the job's), path suffix, expected code, reason, applied)
ANSWERS = [
    ("accepted and applied (server.go:193-198)", {"trainerStatus": {"lastUpdatedTime": NOW}}, None, "", 200, None, 1),
    ("an empty update is answered, not applied (:156-164)", {}, None, "", 200, None, 0),
    ("a wrong token (:142-144)", {"trainerStatus": {"lastUpdatedTime": NOW}}, "nope", "", 403, "Forbidden", 0),
    ("another job's path (:71-72, 201-204)", {}, None, "x", 404, "NotFound", 0),
    ("not JSON (:150-154)", b"{", None, "", 422, "Invalid", 0),
    ("refused by the CRD (:169-178)", {"trainerStatus": {"progressPercentage": 1}}, None, "", 422, "Invalid", 0),
    ("over 64 KiB (middleware.go:51-57)", b" " * ((1 << 16) + 1), None, "", 413, "RequestEntityTooLarge", 0),
]


@pytest.mark.parametrize(
    ("body", "token", "suffix", "code", "reason", "applied"), [c[1:] for c in ANSWERS], ids=[c[0] for c in ANSWERS]
)
def test_the_status_server_answers_as_trainers(server, body, token, suffix, code, reason, applied):
    endpoint, seen = server
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, answer = _post(endpoint, data, token, endpoint.url + suffix if suffix else None)
    assert got == code
    if reason is not None:
        assert (answer["status"], answer["reason"], answer["code"]) == ("Failure", reason, code)  # a metav1.Status
    assert len(seen) == applied


def test_the_endpoint_is_the_trainers_path_and_the_token_is_private(server):
    endpoint, _ = server
    assert endpoint.url.endswith("/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job-1/status")
    assert Path(endpoint.token).stat().st_mode & 0o077 == 0


def _collector() -> tuple[Collector, list[str]]:
    said: list[str] = []
    clock = iter(float(t) for t in range(100))
    return Collector(said.append, every_s=0.0, clock=lambda: next(clock)), said


def _status(pct: int, eta: int, **metrics: str) -> dict[str, Any]:
    pairs = [{"name": k, "value": v} for k, v in metrics.items()]
    return {"progressPercentage": pct, "estimatedRemainingSeconds": eta, "metrics": pairs, "lastUpdatedTime": NOW}


def test_one_collector_for_metrics_lines_and_trainer_status():
    collector, said = _collector()
    collector.feed_status(_status(45, 3600, loss="0.2347", accuracy="0.9876", note="not a number"))
    assert said[-1] == "progress: 45% loss 0.2347 accuracy 0.9876 | eta 1h00m (trainer status)"
    collector.feed("node-0", 'KFTRAIN_METRICS {"epoch": 3, "loss": 0.3}')
    assert said[-1] == "progress: epoch 3 loss 0.3 (node-0) | trainer status 45% eta 1h00m"
    collector.feed_status(_status(100, 0, loss="0.1", accuracy="0.99"))
    # The replicas' last point leads; what only the Trainer's status said keeps its own name, a differing loss is
    # named by its series.
    assert collector.final_values() == {
        "epoch": 3.0,
        "loss": 0.3,
        "loss.trainer-status": 0.1,
        "accuracy": 0.99,
        "progress_percentage": 100.0,
    }
    assert list(collector.groups()) == ["node-0", "trainer-status"]

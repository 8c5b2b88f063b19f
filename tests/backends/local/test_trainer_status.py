"""Kubeflow Trainer's status server as the local backend serves it, and the one collector its reports feed.

Each rule cites kubeflow/trainer@v2.3.0: ``pkg/statusserver/server.go`` (answers), ``pkg/statusserver/middleware.go``
(body size), ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (what the API server accepts in trainerStatus).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kftrain.backends.local import LocalBackend
from kftrain.backends.local.status_server import StatusServer, check_trainer_status
from kftrain.job import load_manifest
from kftrain.metrics.collect import Collector
from testbed.local_harness import options

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
    # metav1.Time: the status server decodes the body into Trainer's typed request (server.go:147-154), and
    # metav1.Time's UnmarshalJSON parses a string with Go's time.RFC3339 layout (apimachinery meta/v1/time.go).
    ("a time with fractions and an offset", {"lastUpdatedTime": "2026-11-26T10:00:00.123456+01:00"}, None),
    ("lastUpdatedTime not a time", {"lastUpdatedTime": "not a time"}, "lastUpdatedTime: must be an RFC 3339"),
    ("lastUpdatedTime without a zone", {"lastUpdatedTime": "2026-11-26T10:00:00"}, "RFC 3339"),
    ("lastUpdatedTime a date only", {"lastUpdatedTime": "2026-11-26"}, "RFC 3339"),
    ("lastUpdatedTime with a space for T", {"lastUpdatedTime": "2026-11-26 10:00:00Z"}, "RFC 3339"),
    ("lastUpdatedTime on no day", {"lastUpdatedTime": "2026-02-30T10:00:00Z"}, "RFC 3339"),
    ("lastUpdatedTime at hour 24", {"lastUpdatedTime": "2026-11-26T24:00:00Z"}, "RFC 3339"),
    ("lastUpdatedTime a number", {"lastUpdatedTime": 1764151200}, "RFC 3339"),
    ("lastUpdatedTime in other digits", {"lastUpdatedTime": "\u0662026-11-26T10:00:00Z"}, "RFC 3339"),
]


@pytest.mark.parametrize(("status", "problem"), [c[1:] for c in RULES], ids=[c[0] for c in RULES])
def test_what_the_api_server_accepts_in_trainer_status(status, problem):
    found = check_trainer_status(status)
    assert (found is None) if problem is None else (problem in str(found)), found


# (id, trainerStatus, the field named, the length said): a refused value is quoted cut, with the length it had.
HUGE = [
    ("lastUpdatedTime of 40,000 characters", {"lastUpdatedTime": "9" * 40_000}, "lastUpdatedTime", 40_002),
    (
        "progressPercentage a 40,000-character string",
        {"progressPercentage": "9" * 40_000, "lastUpdatedTime": NOW},
        "progressPercentage",
        40_002,
    ),
    (
        "estimatedRemainingSeconds of 4,000 digits",
        {"estimatedRemainingSeconds": 10**3999, "lastUpdatedTime": NOW},
        "estimatedRemainingSeconds",
        4_000,
    ),
]


@pytest.mark.parametrize(("status", "field", "length"), [c[1:] for c in HUGE], ids=[c[0] for c in HUGE])
def test_a_huge_value_is_quoted_in_one_short_line(status, field, length):
    found = str(check_trainer_status(status))
    assert f"trainerStatus.{field}:" in found
    assert f"({length} characters)" in found
    assert len(found) < 400 and "\n" not in found


@pytest.fixture
def server(tmp_path: Path):
    seen: list[Any] = []
    status_server = StatusServer("team", "job-1", tmp_path / "status", seen.append)
    endpoint = status_server.start()
    yield endpoint, seen
    status_server.stop()


def _post(
    endpoint: Any, body: bytes, token: str | None = None, url: str | None = None, timeout: float = 10
) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=endpoint.ca_cert)  # the CA the node is given verifies the server
    bearer = Path(endpoint.token).read_text() if token is None else token
    request = urllib.request.Request(url or endpoint.url, data=body, headers={"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
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
    ("not a metav1.Time (:147-154)", {"trainerStatus": {"lastUpdatedTime": "not a time"}}, None, "", 422, "Invalid", 0),
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


GOOD = json.dumps({"trainerStatus": {"lastUpdatedTime": NOW}}).encode()

# (id, the request's headers after its request line and Authorization, its body, expected code, reason); none is
# applied. As Go's net/http reads a request: a Content-Length that is not a decimal number of bytes, one over what an
# int64 holds (strconv.ParseUint(cl, 10, 63): golang/go@go1.26.8:src/net/http/transfer.go parseContentLength, the Go
# Trainer v2.3.0 builds with), or two that differ, is a 400, in Go's plain text and before the token is looked at
# (server.go serve); a request with neither a length nor a chunked body has none (RFC 9112 6.3), and an empty body is
# not a report (422, as the Trainer's json.Decoder says EOF); a chunked body is not read here: 411.
# One over 64 KiB is a 413 from the header alone, before the body is read (kubeflow/trainer@v2.3.0:
# pkg/statusserver/middleware.go bodySizeLimitMiddleware): answered at once whether the body comes or not.
LENGTHS = [
    ("a negative Content-Length", b"Content-Length: -1\r\n", GOOD, 400, ""),
    ("a Content-Length of 30 digits", b"Content-Length: " + b"9" * 30 + b"\r\n", GOOD, 400, ""),
    ("a Content-Length one over an int64", f"Content-Length: {1 << 63}\r\n".encode(), GOOD, 400, ""),
    ("a Content-Length of 5,000 digits", b"Content-Length: " + b"9" * 5000 + b"\r\n", GOOD, 400, ""),
    ("a Content-Length over 64 KiB, a short body", b"Content-Length: 100000\r\n", GOOD, 413, "RequestEntityTooLarge"),
    (
        "a Content-Length of an int64, a short body",
        f"Content-Length: {(1 << 63) - 1}\r\n".encode(),
        GOOD,
        413,
        "RequestEntityTooLarge",
    ),
    # Sent whole before the answer is read: the server reads 256 KiB of it, and the rest resets the connection when
    # it closes, which it does only after the client has had its moment to read the 413 (server.go rstAvoidanceDelay).
    (
        "a 512 KiB body that says so",
        f"Content-Length: {512 << 10}\r\n".encode(),
        b" " * (512 << 10),
        413,
        "RequestEntityTooLarge",
    ),
    ("a Content-Length that is no number", b"Content-Length: abc\r\n", GOOD, 400, ""),
    ("a Content-Length with a sign", b"Content-Length: +5\r\n", GOOD, 400, ""),
    ("a Content-Length with an underscore", b"Content-Length: 4_0\r\n", GOOD, 400, ""),
    ("two Content-Lengths that differ", b"Content-Length: 2\r\nContent-Length: 40\r\n", GOOD, 400, ""),
    ("no Content-Length: no body", b"", GOOD, 422, "Invalid"),
    ("a chunked body", b"Transfer-Encoding: chunked\r\n", b"4\r\n{}  \r\n0\r\n\r\n", 411, "BadRequest"),
]


def _client(endpoint: Any, raw: socket.socket) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=endpoint.ca_cert)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _address(endpoint: Any) -> tuple[str, int]:
    url = urlsplit(endpoint.url)
    return url.hostname or "", url.port or 0


@pytest.mark.parametrize(("headers", "body", "code", "reason"), [c[1:] for c in LENGTHS], ids=[c[0] for c in LENGTHS])
def test_a_request_whose_length_is_not_a_length_is_refused_quietly(
    server, headers, body, code, reason, capfd: pytest.CaptureFixture[str]
):
    endpoint, seen = server
    token = Path(endpoint.token).read_text()
    head = f"POST {urlsplit(endpoint.url).path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    # Answered well within the server's 10 s read deadline, whether the body comes or not.
    with _client(endpoint, socket.create_connection(_address(endpoint), timeout=5)) as tls:
        tls.sendall(head.encode() + headers + b"\r\n" + body)
        response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
        response.begin()
        raw = response.read()
    if code == 400:  # Go's net/http, before any handler: no metav1.Status
        assert (response.status, raw) == (400, b"400 Bad Request")
    else:
        answer = json.loads(raw)
        assert (response.status, answer["reason"], answer["code"]) == (code, reason, code)
    assert seen == []
    assert "Traceback" not in capfd.readouterr().err  # nothing on the job's console


def test_a_content_length_with_leading_zeros_is_its_number(server):
    """Go's strconv.ParseUint reads "0…062" as 62 (transfer.go parseContentLength): the report is applied."""
    endpoint, seen = server
    token = Path(endpoint.token).read_text()
    head = f"POST {urlsplit(endpoint.url).path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    length = str(len(GOOD)).zfill(30)
    with _client(endpoint, socket.create_connection(_address(endpoint), timeout=5)) as tls:
        tls.sendall(f"{head}Content-Length: {length}\r\n\r\n".encode() + GOOD)
        response = http.client.HTTPResponse(tls)
        response.begin()
        response.read()
    assert response.status == 200 and len(seen) == 1


def _silent(endpoint: Any) -> socket.socket:
    return socket.create_connection(_address(endpoint), timeout=10)


def _half_hello(endpoint: Any) -> socket.socket:
    raw = socket.create_connection(_address(endpoint), timeout=10)
    raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello, never the rest
    return raw


def _no_request(endpoint: Any) -> socket.socket:
    return _client(endpoint, socket.create_connection(_address(endpoint), timeout=10))


def _half_headers(endpoint: Any) -> socket.socket:
    tls = _no_request(endpoint)
    tls.sendall(b"POST / HTTP/1.1\r\nHost:")
    return tls


def _short_body(endpoint: Any) -> socket.socket:
    tls = _no_request(endpoint)
    token = Path(endpoint.token).read_text()
    path = urlsplit(endpoint.url).path
    tls.sendall(f"POST {path} HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{".encode())
    return tls


# (id, a client that connects and then holds its connection)
HOLDERS = [
    ("a TCP connection that sends nothing", _silent),
    ("half a TLS ClientHello", _half_hello),
    ("a handshake and no request", _no_request),
    ("half a request's headers", _half_headers),
    ("a body shorter than its Content-Length", _short_body),
]


@pytest.mark.parametrize("hold", [c[1] for c in HOLDERS], ids=[c[0] for c in HOLDERS])
def test_a_client_that_holds_its_connection_holds_nothing_else(tmp_path: Path, hold: Any) -> None:
    """Anyone on the machine can connect: a held connection neither blocks another node's post nor the server's
    stop, and is closed after the server's read deadline (Trainer's: readTimeout, server.go)."""
    seen: list[Any] = []
    status_server = StatusServer("team", "job-1", tmp_path / "status", seen.append, read_timeout_s=0.3)
    endpoint = status_server.start()
    held = hold(endpoint)
    try:
        assert _post(endpoint, GOOD, timeout=5)[0] == 200  # served while the other connection is held
        assert len(seen) == 1
        held.settimeout(10)
        with contextlib.suppress(ConnectionResetError, ssl.SSLError):  # closed by its TLS layer: as good
            assert held.recv(1) == b""  # the server closed it at its deadline
        held2 = hold(endpoint)  # and one held at the stop does not hold the stop
        stopper = threading.Thread(target=status_server.stop, daemon=True)
        stopper.start()
        stopper.join(timeout=5)
        held2.close()
        assert not stopper.is_alive(), "the server's stop waited on a client"
    finally:
        held.close()
        status_server.stop()


# A trainer node that reports once the test says so, and says what it was answered.
REPORTER = """
import json, os, ssl, time, urllib.request
out = os.environ["OUT_DIR"]
with open(os.path.join(out, "url.tmp"), "w") as f:
    f.write(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
os.rename(os.path.join(out, "url.tmp"), os.path.join(out, "url"))
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.02)
context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read()
body = json.dumps({"trainerStatus": {"lastUpdatedTime": "2026-11-26T10:00:00Z"}}).encode()
request = urllib.request.Request(os.environ["KUBEFLOW_TRAINER_SERVER_URL"], data=body,
                                 headers={"Authorization": "Bearer " + token})
with urllib.request.urlopen(request, context=context, timeout=5) as response:
    print("posted:", response.status, flush=True)
"""


@pytest.mark.usefixtures("no_leftover_processes")
def test_the_launcher_ends_with_its_job_whoever_holds_a_connection_to_its_status_server(
    tmp_path: Path, out_dir: Path
) -> None:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "held"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 1,
                "command": [sys.executable, "-c", REPORTER],
                "env": [{"name": "OUT_DIR", "value": str(out_dir)}],
            },
        },
    }
    config = options(tmp_path, private_workspace=False)
    backend = LocalBackend(config)
    handle = backend.submit(load_manifest(yaml.safe_dump(job)))
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(backend.wait(handle, timeout=60)), daemon=True)
    held: socket.socket | None = None
    try:
        deadline = time.monotonic() + 30
        while not (out_dir / "url").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        url = urlsplit((out_dir / "url").read_text())
        held = socket.create_connection((url.hostname or "", url.port or 0), timeout=10)  # sends nothing
        (out_dir / "go").touch()
        waiter.start()
        waiter.join(timeout=30)
        assert not waiter.is_alive(), "the launcher did not end with its job"
        assert results[0].succeeded, config.out.getvalue()  # type: ignore[attr-defined]
        assert "posted: 200" in config.out.getvalue()  # type: ignore[attr-defined]
    finally:
        if held is not None:
            held.close()
        if not results:
            backend.cancel(handle)


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

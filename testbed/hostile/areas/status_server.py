"""The local backend's Trainer status server (kftrain/backends/local/status_server.py): a TCP connection that sends
nothing (it must not hold another node's report, the job's end, SIGTERM or --timeout), Content-Length -1 with a
5 MiB body, Content-Length abc, lastUpdatedTime "not a time", and what Trainer's server answers.

The requests and holders are tests/backends/local/test_trainer_status.py's (``_post``, ``ANSWERS``, ``LENGTHS``,
``HOLDERS``, ``RULES``, ``GOOD``), taken by name when the case runs; a server's refusal is the case's clear error,
its "200" the call succeeding. The job cases run ``kftrain launch --local`` of a TrainJob whose node says where its
status server is.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from testbed.hostile.case import CLEAR, FINE, HANG, WRONG, Case, Observed, Refused, Sandbox

AREA = "status-server"
SURFACE = "the local status server (HTTPS POST)"
FIVE_MIB = 5 << 20


def _tests() -> Any:
    from tests.backends.local import test_trainer_status

    return test_trainer_status


@contextlib.contextmanager
def _server(sb: Sandbox, read_timeout_s: float = 10.0) -> Iterator[tuple[Any, list[Any]]]:
    from kftrain.backends.local.status_server import StatusServer

    seen: list[Any] = []
    server = StatusServer("team", "job-1", sb.work / "status", seen.append, read_timeout_s=read_timeout_s)
    endpoint = server.start()
    sb.ready()
    try:
        yield endpoint, seen
    finally:
        server.stop()


def _answered(code: int, answer: dict[str, Any], seen: list[Any], applied: bool) -> None:
    """A 200 is the call succeeding (its report applied, or not); another code the server's refusal."""
    if code == 200:
        if applied and not seen:
            raise AssertionError("answered 200 but not applied")
        return
    if seen:
        raise Observed(WRONG, f"answered {code} but applied {seen[0]!r}")
    raise Refused(f"{code} {answer.get('reason')}: {answer.get('message')}")


def _answer(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        row = next(c for c in _tests().ANSWERS if c[0] == key)
        body, token, suffix = row[1:4]
        with _server(sb) as (endpoint, seen):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            code, answer = _tests()._post(endpoint, data, token, endpoint.url + suffix if suffix else None)
            _answered(code, answer, seen, applied=row[-1] == 1)

    return run


def _status(status: dict[str, Any]) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        with _server(sb) as (endpoint, seen):
            code, answer = _tests()._post(endpoint, json.dumps({"trainerStatus": status}).encode())
            _answered(code, answer, seen, applied=True)

    return run


def _raw(headers: bytes, body: bytes) -> Callable[[Sandbox], None]:
    """A request written as a hostile client writes it (its headers after the request line and Authorization, then
    its body, whatever they say); then the server must still serve a good report, and must have applied nothing of
    this one. The client sends, then reads, on one thread: an SSL socket is not safe to send on from one thread while
    another reads it (an answer could be lost, or the process crash). Every case here is answered from the header,
    or from a body of at most SENT_BODY_BYTES."""

    def run(sb: Sandbox) -> None:
        tests = _tests()
        with _server(sb) as (endpoint, seen):
            token = Path(endpoint.token).read_text()
            head = f"POST {urlsplit(endpoint.url).path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            got = ""
            with tests._client(endpoint, socket.create_connection(tests._address(endpoint), timeout=20)) as tls:
                _send_until_answered(tls, head.encode() + headers + b"\r\n" + body)
                try:
                    response = http.client.HTTPResponse(tls)
                    response.begin()
                    raw = response.read()
                    if response.getheader("Content-Type", "").startswith("text/plain"):
                        got = raw.decode(errors="replace")  # Go's net/http, before any handler: "400 Bad Request"
                    else:
                        answer = json.loads(raw)
                        got = f"{response.status} {answer.get('reason')}: {answer.get('message')}"
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    got = f"the connection was closed on the unread body ({type(exc).__name__})"
            if tests._post(endpoint, tests.GOOD, timeout=10)[0] != 200 or len(seen) != 1:
                raise Observed(WRONG, f"after it, a good report was not applied alone ({got}; applied: {seen})")
            if got.startswith("200"):
                raise Observed(WRONG, f"answered {got}")
            raise Refused(got)

    return run


# What of a body the client sends before reading the answer: within the loopback socket's buffers, so sending never
# waits on a server that answers from the header alone (a 413 or a 400 it decides before reading the body), and the
# server's drain (256 KiB) takes all of it, so its close resets nothing the client has yet to read.
SENT_BODY_BYTES = 64 * 1024


def _send_until_answered(tls: ssl.SSLSocket, data: bytes) -> None:
    """Send the request's head and at most SENT_BODY_BYTES of its body, all on this thread."""
    head, sep, body = data.partition(b"\r\n\r\n")
    with contextlib.suppress(OSError):  # a server that closed early: its answer (or its silence) is read next
        tls.sendall(head + sep + body[:SENT_BODY_BYTES])


def _held(key: str) -> Callable[[Sandbox], None]:
    """A client that connects and holds its connection: another node's report is served meanwhile, the connection
    is closed at the server's read deadline, and one held at the server's stop does not hold the stop."""

    def run(sb: Sandbox) -> None:
        tests = _tests()
        hold = next(c[1] for c in tests.HOLDERS if c[0] == key)
        with _server(sb, read_timeout_s=0.5) as (endpoint, seen):
            held = hold(endpoint)
            try:
                try:
                    code = tests._post(endpoint, tests.GOOD, timeout=5)[0]
                except OSError as exc:
                    raise Observed(HANG, f"another node's report was not served while one was held: {exc}") from None
                if code != 200 or len(seen) != 1:
                    raise AssertionError(f"the report was answered {code}, applied {seen}")
                held.settimeout(5)
                with contextlib.suppress(ConnectionResetError, ssl.SSLError):
                    try:
                        if held.recv(1) != b"":
                            raise AssertionError("the held connection was answered bytes")
                    except TimeoutError:
                        raise Observed(HANG, "the held connection was not closed at the read deadline") from None
            finally:
                held.close()
        server_stop_not_held(sb, hold)

    return run


def server_stop_not_held(sb: Sandbox, hold: Callable[[Any], socket.socket]) -> None:
    from kftrain.backends.local.status_server import StatusServer

    server = StatusServer("team", "job-2", sb.work / "status2", lambda status: None)
    endpoint = server.start()
    held = hold(endpoint)
    stopper = threading.Thread(target=server.stop, daemon=True)
    stopper.start()
    stopper.join(timeout=5)
    held.close()
    if stopper.is_alive():
        raise Observed(HANG, "the server's stop waited on a held connection")


# A TrainJob node: says where its status server is, then (MODE=post) reports once told to, or sleeps on.
NODE = """
import json, os, ssl, sys, time, urllib.request
out = os.environ["OUT_DIR"]
with open(os.path.join(out, "url.tmp"), "w") as f:
    f.write(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
os.rename(os.path.join(out, "url.tmp"), os.path.join(out, "url"))
if os.environ["MODE"] != "post":
    time.sleep(600)
while not os.path.exists(os.path.join(out, "go")):
    time.sleep(0.02)
context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read()
body = json.dumps({"trainerStatus": {"lastUpdatedTime": "2026-11-26T10:00:00Z", "progressPercentage": 50}}).encode()
request = urllib.request.Request(os.environ["KUBEFLOW_TRAINER_SERVER_URL"], data=body,
                                 headers={"Authorization": "Bearer " + token})
with urllib.request.urlopen(request, context=context, timeout=5) as response:
    print("posted:", response.status, flush=True)
"""


def _job(sb: Sandbox, mode: str) -> Path:
    from testbed.manifests import as_yaml, trainjob

    out = sb.work / "out"
    out.mkdir()
    env = [{"name": "OUT_DIR", "value": str(out)}, {"name": "MODE", "value": mode}]
    job = trainjob(name="held", trainer={"numNodes": 1, "command": [sys.executable, "-c", NODE], "env": env})
    return sb.write("job.yaml", as_yaml(job))


def _hold_once_listening(sb: Sandbox) -> socket.socket:
    url_file = sb.work / "out" / "url"
    deadline = time.monotonic() + 60
    while not url_file.exists():
        if time.monotonic() > deadline:
            raise AssertionError("the node never said where its status server is")
        time.sleep(0.05)
    url = urlsplit(url_file.read_text())
    return socket.create_connection((url.hostname or "", url.port or 0), timeout=10)  # and sends nothing


def _job_ends(sb: Sandbox) -> None:
    """The node reports and ends while a silent connection is held: the launch ends with its job, succeeded."""
    launched = sb.process("launch", "-f", _job(sb, "post"), "--local", "--timeout", "120")
    try:
        held = _hold_once_listening(sb)
        (sb.work / "out" / "go").touch()
        code = launched.finish(timeout=60)
        held.close()
    finally:
        launched.stop()
    if code != 0 or "posted: 200" not in launched.output():
        raise AssertionError(f"the job ended with {code}: {launched.output()[-2000:]}")


def _ends_on(how: str) -> Callable[[Sandbox], None]:
    """A node that never ends, a silent connection held: SIGTERM (or the launch's --timeout) still ends it all."""

    def run(sb: Sandbox) -> None:
        extra = ["--timeout", "5"] if how == "timeout" else ["--timeout", "300"]
        launched = sb.process("launch", "-f", _job(sb, "sleep"), "--local", *extra)
        try:
            held = _hold_once_listening(sb)
            if how == "sigterm":
                time.sleep(0.5)
                launched.proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            code = launched.finish(timeout=30)
            held.close()
        finally:
            launched.stop()
        said = launched.output().strip().splitlines()[-1:] or [""]
        if how == "sigterm" and code != 143:
            raise AssertionError(f"SIGTERM ended it with {code}: {said[0]}")
        if how == "timeout" and code == 0:
            raise Observed(WRONG, f"a job past its --timeout succeeded: {said[0]}")
        print(f"ended with {code} in {time.monotonic() - started:.1f} s: {said[0]}")

    return run


ANSWERS = {
    "accepted and applied (server.go:193-198)": (FINE, ""),
    "an empty update is answered, not applied (:156-164)": (FINE, ""),
    "a wrong token (:142-144)": (CLEAR, "403"),
    "another job's path (:71-72, 201-204)": (CLEAR, "404"),
    "not JSON (:150-154)": (CLEAR, "422"),
    "refused by the CRD (:169-178)": (CLEAR, "422"),
    "over 64 KiB (middleware.go:51-57)": (CLEAR, "413"),
}
NOW = "2026-11-26T10:00:00Z"
STATUSES: list[tuple[str, dict[str, Any], str]] = [
    ('lastUpdatedTime "not a time"', {"lastUpdatedTime": "not a time"}, "lastUpdatedTime"),
    ("lastUpdatedTime without a zone", {"lastUpdatedTime": "2026-11-26T10:00:00"}, "lastUpdatedTime"),
    ("lastUpdatedTime on no day", {"lastUpdatedTime": "2026-02-30T10:00:00Z"}, "lastUpdatedTime"),
    ("lastUpdatedTime in other digits", {"lastUpdatedTime": "\u0662026-11-26T10:00:00Z"}, "lastUpdatedTime"),
    ("lastUpdatedTime of 40,000 characters", {"lastUpdatedTime": "9" * 40_000}, "lastUpdatedTime"),
    ("no lastUpdatedTime", {"progressPercentage": 1}, "lastUpdatedTime"),
    ("progressPercentage 101", {"progressPercentage": 101, "lastUpdatedTime": NOW}, "progressPercentage"),
    ("a metric value a number", {"metrics": [{"name": "loss", "value": 0.5}], "lastUpdatedTime": NOW}, "metrics[0]"),
    ("257 metrics", {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)], "lastUpdatedTime": NOW}, "256"),
    ("trainerStatus a list", [NOW], "trainerStatus"),  # type: ignore[list-item]
]
GOOD_BODY = b'{"trainerStatus": {"lastUpdatedTime": "2026-11-26T10:00:00Z"}}'
# (name, the headers, the body, the answer Trainer's server gives). Go's net/http refuses a Content-Length that is no
# decimal number it can hold (parseContentLength: a parse error or an overflow is "bad Content-Length", 400:
# golang/go@go1.26.8:src/net/http/transfer.go, the Go Trainer v2.3.0 builds with); Trainer answers 413 from the
# header alone, before reading the body (kubeflow/trainer@v2.3.0:pkg/statusserver/middleware.go,
# bodySizeLimitMiddleware).
LENGTHS: list[tuple[str, bytes, bytes, str]] = [
    ("Content-Length -1 with a 5 MiB body", b"Content-Length: -1\r\n", b"{" + b" " * FIVE_MIB + b"}", "400"),
    ("Content-Length abc", b"Content-Length: abc\r\n", GOOD_BODY, "400"),
    ("Content-Length 4_0", b"Content-Length: 4_0\r\n", GOOD_BODY, "400"),
    ("Content-Length of 30 digits", b"Content-Length: " + b"9" * 30 + b"\r\n", GOOD_BODY, "400"),
    ("Content-Length 100000 with a 60-byte body", b"Content-Length: 100000\r\n", GOOD_BODY, "413"),
    ("two Content-Lengths that differ", b"Content-Length: 2\r\nContent-Length: 40\r\n", GOOD_BODY, "400"),
    ("a chunked body", b"Transfer-Encoding: chunked\r\n", b"4\r\n{}  \r\n0\r\n\r\n", "411"),
    ("a 5 MiB body that says so", f"Content-Length: {FIVE_MIB}\r\n".encode(), b" " * FIVE_MIB, "413"),
]
HOLDERS = ["a TCP connection that sends nothing", "half a TLS ClientHello", "a body shorter than its Content-Length"]

CASES: list[Case] = [
    *(
        Case(AREA, key, expect, SURFACE, _answer(key), names=(code,) if code else ())
        for key, (expect, code) in ANSWERS.items()
    ),
    *(Case(AREA, name, CLEAR, SURFACE, _status(status), names=("422", field)) for name, status, field in STATUSES),
    *(
        Case(AREA, name, CLEAR, SURFACE + ", raw", _raw(headers, body), names=(code,))
        for name, headers, body, code in LENGTHS
    ),
    *(
        Case(AREA, f"{key}: others served, closed at the deadline, the stop not held", FINE, SURFACE, _held(key))
        for key in HOLDERS
    ),
    Case(
        AREA,
        "a silent connection held: the job still ends",
        FINE,
        "kftrain launch --local (TrainJob)",
        _job_ends,
        timeout_s=120,
    ),
    Case(
        AREA,
        "a silent connection held: SIGTERM still ends the launch",
        FINE,
        "kftrain launch --local + SIGTERM",
        _ends_on("sigterm"),
        timeout_s=120,
    ),
    Case(
        AREA,
        "a silent connection held: --timeout still ends the launch",
        FINE,
        "kftrain launch --local --timeout 5",
        _ends_on("timeout"),
        timeout_s=120,
    ),
]

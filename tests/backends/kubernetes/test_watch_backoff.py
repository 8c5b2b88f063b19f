"""A list/watch loop of the Kubernetes backend against a server that keeps failing it waits between its tries as
client-go's reflector does, and gives up in one line naming the server and the reason
(kftrain/backends/kubernetes/backoff.py). Each misbehaving server is a small one of this module's, on 127.0.0.1."""

from __future__ import annotations

import functools
import io
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import KubeApi
from kftrain.backends.kubernetes.backoff import Backoff, ServerKeepsFailing
from kftrain.backends.kubernetes.watch import Watcher
from kftrain.retry import RetryPolicy

LISTED = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": []}
GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
HTML = b"<html><body><h1>Sign in to continue</h1></body></html>"


class Misbehaving(BaseHTTPRequestHandler):
    """Lists as the API server does; answers each watch as the server's ``mode`` says."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        mode: str = self.server.mode  # type: ignore[attr-defined]
        watch = "watch=" in self.path
        if mode == "html":  # a proxy's page, for every request
            return self._send(200, HTML, "text/html")
        if not watch:
            return self._send(200, json.dumps(LISTED).encode(), "application/json")
        if mode == "410":
            return self._send(200, json.dumps(GONE).encode() + b"\n", "application/json")
        if mode == "ended at once":
            return self._send(200, b"", "application/json")
        if mode == "500":
            status = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd is down"}
            return self._send(500, json.dumps(status).encode(), "application/json")
        if mode == "reset":  # the connection reset with no answer: closed at once, lingering 0 s (an RST)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.wfile.close()
            self.connection.close()
            self.wfile = io.BytesIO()  # what http.server flushes after this answer goes nowhere
            self.close_connection = True
            return None
        raise AssertionError(mode)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The address of a server answering as ``request.param`` says; "refused": one that is gone."""
    mode: str = request.param
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    httpd.mode = mode  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    if mode == "refused":
        httpd.server_close()
        yield url
        return
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _watcher(url: str, retry: RetryPolicy, backoff: Backoff | None = None) -> tuple[Watcher, list[bool]]:
    """A watch of the pods at ``url``, and every request it makes (True: a watch, False: a list)."""
    api_client = client.ApiClient(client.Configuration(host=url))
    api_client.configuration.retries = 0  # every request the watch makes reaches the server once
    api = KubeApi(retry, api_client)
    requests: list[bool] = []
    pods = functools.partial(client.CoreV1Api(api_client).list_namespaced_pod, "default", label_selector="job=x")

    def request(**params: Any) -> Any:
        requests.append(bool(params.get("watch")))
        return pods(**params)

    console = Console(out=io.StringIO())
    options: dict[str, Any] = {"retry": retry, "window_s": 5, "changed": threading.Event()}
    if backoff is not None:
        options["backoff"] = backoff
    return Watcher(api, console, "pods of x", request, **options), requests


def _stop(watcher: Watcher) -> None:
    watcher.stop()
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()


# (server, the reason the line names)
SERVERS = [
    ("410", "410 Gone"),
    ("ended at once", "the watch ended at once with no event"),
    ("html", "not the API's JSON"),
    ("500", "HTTP 500"),
    ("reset", "ConnectionResetError: [Errno 104] Connection reset by peer"),
    ("refused", "ConnectionRefusedError: [Errno 111] Connection refused"),
]
FOR_S = 1.5
# Waits 0.05 s doubling to 0.2 s (each at least that: jitter only adds): in FOR_S, at most 1 + 0.05 + 0.1 + 0.2 * n
# tries, two requests each (a list, a watch); without a back-off, thousands.
POLICY = RetryPolicy(attempts=10_000, initial_s=0.05, max_s=0.2)
BOUND = 2 * (1 + 3 + int((FOR_S - 0.15) / 0.2))


@pytest.mark.parametrize(("server", "reason"), SERVERS, ids=[s[0] for s in SERVERS], indirect=["server"])
def test_a_server_that_keeps_failing_the_watch_is_asked_within_the_back_off(server: str, reason: str) -> None:
    watcher, requests = _watcher(server, POLICY)
    watcher.start()
    time.sleep(FOR_S)
    _stop(watcher)
    assert 2 <= len(requests) <= BOUND, (len(requests), requests[:10])
    watcher.raise_error()  # it has not given up: far fewer tries than the policy's


@pytest.mark.parametrize(("server", "reason"), SERVERS, ids=[s[0] for s in SERVERS], indirect=["server"])
def test_a_server_that_keeps_failing_the_watch_ends_it_in_one_line(server: str, reason: str) -> None:
    watcher, requests = _watcher(server, RetryPolicy(attempts=4, initial_s=0.01, max_s=0.02))
    watcher.start()
    deadline = time.monotonic() + 10
    while watcher._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    _stop(watcher)
    with pytest.raises(ServerKeepsFailing) as raised:
        watcher.raise_error()
    said = str(raised.value)
    assert said.startswith(f"the API server at {server} kept failing the watch of pods of x: 4 tries in a row"), said
    assert reason in said.split(", the last: ")[1] and len(said.splitlines()) == 1, said
    assert len(requests) <= 2 * 4


def test_the_waits_are_the_reflectors() -> None:
    """0.8 s doubling to 30 s, each jittered by up to as much again, starting over after 2 min without a wait
    (k8s.io/client-go@v0.36.3:tools/cache/reflector.go:62-67); in 20 s of a server failing at once, 5 tries."""
    now = [0.0]
    backoff = Backoff(lambda: "https://k", "watch", 0.8, 30.0, None, clock=lambda: now[0], rand=lambda: 0.0)
    waits = []
    for _ in range(8):
        waits.append(backoff.failed("410 Gone"))
        now[0] += waits[-1]
    assert waits == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    assert sum(1 for t in [sum(waits[:i]) for i in range(8)] if t < 20.0) == 5
    jittered = Backoff(lambda: "https://k", "watch", 0.8, 30.0, None, clock=lambda: now[0], rand=lambda: 0.999)
    assert 1.59 < jittered.failed("x") < 1.6  # up to as much again
    now[0] += 121.0
    assert backoff.failed("x") == pytest.approx(0.8)  # over 2 min since the last wait: from the start


@pytest.mark.parametrize(("server", "reason"), SERVERS, ids=[s[0] for s in SERVERS], indirect=["server"])
def test_in_20_s_of_a_failing_server_the_reflectors_waits_allow_5_tries(server: str, reason: str) -> None:
    """The waits client-go's reflector waits (0.8 s doubling, no jitter: the most tries), in virtual time: 5 tries
    (0.8 + 1.6 + 3.2 + 6.4 s, then 12.8 s more passes 20 s), a list and a watch each at most."""
    now = [0.0]
    watcher: Watcher | None = None

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 20.0 and watcher is not None:
            watcher.stop()

    backoff = Backoff(lambda: server, "watch", 0.8, 30.0, None, clock=lambda: now[0], rand=lambda: 0.0, sleep=sleep)
    watcher, requests = _watcher(server, POLICY, backoff)
    watcher.start()
    watcher._thread.join(20)
    _stop(watcher)
    assert now[0] == pytest.approx(24.8)
    assert 5 <= len(requests) <= 10, requests

"""A local S3 for tests: ``moto_server`` in a subprocess, plus a fault-injecting proxy in front of it.

The fixtures ``moto`` (the session's server) and ``s3_env`` (a fresh bucket, the environment pointing at it)
are in testbed/fixtures.py, available to every test.

``MotoServer`` can be stopped and started again on the same port (moto keeps objects in RAM, so a
restart loses them, like a MinIO pod without a volume); ``FaultProxy`` forwards to it and answers
chosen requests with 500/503 SlowDown or a reset connection instead.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from testbed.ports import free_port

ACCESS_KEY = "testing"
SECRET_KEY = "testing"


def _moto_command() -> list[str]:
    exe = Path(sys.executable).with_name("moto_server")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    return [sys.executable, "-m", "moto.server"]


class MotoServer:
    """``moto_server -H 127.0.0.1 -p PORT`` as a subprocess; restartable on the same port."""

    def __init__(self, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [*_moto_command(), "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode} on port {self.port}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on {self.endpoint} within {timeout}s")

    def stop(self) -> None:
        # SIGKILL: state is in RAM anyway, and a crash is the harsher (and faster) kind of restart.
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def reset(self) -> None:
        """Forget every bucket and object (cheaper than a restart)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def boto3_client(endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET_KEY):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1"
    )


# --------------------------------------------------------------------------------------------------
# Fault injection


@dataclass
class Fault:
    """Answer the next ``times`` requests matching ``method`` and ``match`` with ``kind`` instead.

    kind: ``"500"`` (InternalError), ``"503"`` (SlowDown), ``"reset"`` (RST before any answer),
    ``"truncate"`` (headers and half the body, then RST) or ``"delay"`` (pass it on after 0.5 s: a slow
    request, during which a concurrent client sends others).
    """

    method: str
    match: str
    kind: str
    times: int = 1
    hits: int = 0


_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
}


@dataclass
class FaultProxy:
    """An HTTP proxy to ``upstream`` that injects the queued faults; everything else passes through."""

    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    # The most requests of each method the proxy was serving at one moment: evidence of client concurrency.
    peak_in_flight: dict[str, int] = field(default_factory=dict)
    _in_flight: dict[str, int] = field(default_factory=dict)
    # While set, every request is dropped (RST), as a server that is away: see ``GatedMoto``.
    down: bool = False

    def __post_init__(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reset(self) -> None:
                # SO_LINGER 0: close() sends RST, what a crashing server or a flaky LB looks like.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _handle(self) -> None:
                proxy._enter(self.command)
                try:
                    self._serve()
                finally:
                    proxy._leave(self.command)

            def _serve(self) -> None:
                body = self._body()
                if proxy.down:
                    self._reset()
                    return
                proxy.requests.append(f"{self.command} {self.path}")
                fault = proxy._take(self.command, self.path)
                if fault is not None and fault.kind == "delay":
                    time.sleep(0.5)
                if fault is not None and fault.kind == "reset":
                    self._reset()
                    return
                if fault is not None and fault.kind in _ERRORS:
                    status, code, message = _ERRORS[fault.kind]
                    xml = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{message}</Message><RequestId>fault</RequestId></Error>"
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(xml)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                    if body or self.command in ("PUT", "POST"):
                        headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except OSError:
                    self._reset()  # upstream down: the client sees a dropped connection
                    return
                finally:
                    conn.close()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(key, value)
                length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault is not None and fault.kind == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self._reset()
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        # A short poll: close() (each test's teardown) waits for the serving loop to notice the shutdown, up to
        # serve_forever's poll interval (half a second by default).
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def inject(self, method: str, match: str, kind: str, times: int = 1) -> Fault:
        fault = Fault(method, match, kind, times)
        with self._lock:
            self.faults.append(fault)
        return fault

    def _enter(self, method: str) -> None:
        with self._lock:
            self._in_flight[method] = self._in_flight.get(method, 0) + 1
            self.peak_in_flight[method] = max(self.peak_in_flight.get(method, 0), self._in_flight[method])

    def _leave(self, method: str) -> None:
        with self._lock:
            self._in_flight[method] -= 1

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.hits < fault.times and fault.method == method and fault.match in path:
                    fault.hits += 1
                    return fault
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def short_client_backoff(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.01) -> None:
    """botocore waits rand(0, 1) x 2**n seconds before it tries a failed request again (its standard retry mode's
    backoff, which no setting shortens): a test of faults and retries makes it wait ``seconds`` instead. How many
    times botocore tries (AWS_MAX_ATTEMPTS) and what it retries are unchanged."""
    from botocore.retries.standard import ExponentialBackoff  # aiobotocore's retry handler builds this one too

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: seconds)


# --------------------------------------------------------------------------------------------------
# The environment a step reads the store from (the fixtures moto and s3_env: testbed/fixtures.py)


def set_s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point kftrain.storage at ``endpoint`` with the test credentials, through the environment only."""
    for name in (
        "MINIO_ENDPOINT",
        "AWS_ENDPOINT_URL_S3",
        "MINIO_SERVICE_SERVICE_HOST",
        "MINIO_SERVICE_SERVICE_PORT",
        "KFTRAIN_S3_CREDENTIALS_DIR",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

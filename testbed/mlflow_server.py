"""A real MLflow tracking server for the tests, the runs KFP 2.17's MLflow plugin would give a task, and stand-ins
for a server that fails.

:func:`mlflow_server`: ``mlflow server`` from its own venv (``.venv/mlflow-server``, scripts/install_mlflow_server.sh),
SQLite and artifacts in the folder it is given, on 127.0.0.1, its job runner off; stopping it ends its process group.
:func:`kfp_task_run`: the parent and nested runs KFP 2.17 makes for a task, and the variables its driver gives it
(kubeflow/pipelines@2.17.0:backend/src/v2/common/plugins/mlflow/handler.go, OnTaskStart, RetrieveUserContainerEnvVars).
:func:`hostile_server`: throttling for an hour, 500, 401, or a body trickling in, on 127.0.0.1.
``python -m testbed.mlflow_server [FOLDER]``: the same server for a reader to try ``kftrain run --mlflow`` on.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.ports import free_port
from testbed.reference import REPO

SERVER_VENV = REPO / ".venv" / "mlflow-server"
MLFLOW = SERVER_VENV / "bin" / "mlflow"
INSTALL = "scripts/install_mlflow_server.sh (run by make install)"
START_TIMEOUT_S = 120.0


@dataclass
class MlflowServer:
    uri: str
    folder: Path
    process: subprocess.Popen[bytes]

    def client(self) -> Any:
        """MLflow's own client (mlflow-skinny, this venv's) of this server."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[MlflowServer]:
    """``mlflow server`` storing everything in ``folder``, up and answering; stopped (its whole process group)
    when the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "TMPDIR": str(folder / "tmp"),
        # mlflow/mlflow@v3.17.2:mlflow/server/__init__.py: without it the server starts Huey consumers whose queue
        # is a mkdtemp in /dev/shm.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    command = [
        str(MLFLOW),
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--artifacts-destination",
        str(folder / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    with (folder / "server.log").open("wb") as log:
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = MlflowServer(uri, folder, process)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(uri):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start ({command}):\n{server.log()}")
            time.sleep(0.3)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """End the server's process group: SIGTERM, then SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)
    # Its workers were in the group too; wait until none is left.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def kfp_task_run(client: Any, uri: str, task: str, *, display_name: str = "pipeline-run") -> dict[str, str]:
    """Runs as KFP 2.17 makes them for one task of a pipeline run (see the module's docstring); returns the
    variables the task's container gets."""
    found = client.get_experiment_by_name("KFP-Default")
    experiment = found.experiment_id if found is not None else client.create_experiment("KFP-Default")
    parent = client.create_run(
        experiment,
        run_name=display_name,
        tags={"kfp.pipeline_run_id": f"{display_name}-id", "kfp.pipeline_run_url": ""},
    )
    nested = client.create_run(experiment, run_name=task, tags={"mlflow.parentRunId": parent.info.run_id})
    return {
        "MLFLOW_RUN_ID": nested.info.run_id,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_EXPERIMENT_ID": str(experiment),
    }


# -- stand-ins for a tracking server that fails ----------------------------------------------------------------------

HOSTILE_LIFETIME_S = 60.0  # a stand-in stops by itself after this, whatever its test does


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every request as its server's ``mode`` says (see :func:`hostile_server`)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        self.server.requests += 1  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.close_connection = True
        if mode == "silent-body":  # headers, then a byte every 2 s: each read is within any read timeout
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            stopping: threading.Event = self.server.stopping  # type: ignore[attr-defined]
            while not stopping.wait(2):
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        status, extra = {
            "retry-after": (503, {"Retry-After": "3600"}),
            "throttles": (429, {"Retry-After": "3600"}),
            "500": (500, {}),
            "401": (401, {}),
        }[mode]
        body = b'{"error_code": "INTERNAL_ERROR", "message": "stand-in"}'
        if status == 401:
            body = b'{"error_code": "UNAUTHENTICATED", "message": "You are not authenticated."}'
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def hostile_server(mode: str) -> Iterator[str]:
    """A stand-in tracking server on 127.0.0.1 answering every request one way: ``retry-after`` (503,
    ``Retry-After: 3600``), ``throttles`` (429, the same), ``500``, ``401``, or ``silent-body`` (a 200 whose body
    trickles in a byte every 2 s). Yields its URI; stopped when the block ends, or after
    :data:`HOSTILE_LIFETIME_S`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    server.mode = mode  # type: ignore[attr-defined]
    server.requests = 0  # type: ignore[attr-defined]
    server.stopping = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    timer = threading.Timer(HOSTILE_LIFETIME_S, server.stopping.set)  # type: ignore[attr-defined]
    timer.daemon = True
    timer.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        timer.cancel()
        server.stopping.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.mlflow_server [FOLDER]``: the tracking server ``make install`` provides, to try
    ``kftrain run --mlflow``; what it keeps stays in FOLDER (default ``mlflow-data``); Ctrl-C stops it."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m testbed.mlflow_server", description=main.__doc__)
    parser.add_argument("folder", nargs="?", default="mlflow-data", type=Path)
    folder = parser.parse_args(argv).folder.resolve()
    if not MLFLOW.exists():
        print(f"no MLflow server in {SERVER_VENV}: run {INSTALL}", file=sys.stderr)
        return 1
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    with mlflow_server(folder) as server:
        print(f"MLflow tracking server: {server.uri} (its data in {folder}; Ctrl-C stops it). Try:", flush=True)
        print(f"  kftrain run pytorch-digits --mlflow {server.uri}", flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

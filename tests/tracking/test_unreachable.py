"""A tracking server that is down, never answers or refuses the credentials ends the step within 10 s, in one line
naming the server and why, before the job is created; the same ends a local pipeline run before its first step.

The servers here are stand-ins for the three ways a server fails (nothing listening, a listener that never answers,
HTTP 401 to every request): what matters is how MLflow's own client, with the step's bounded retries, meets them.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from kftrain.tracking.client import TrackingError
from kftrain.tracking.local import tracked_pipeline
from testbed.fixtures import CANARY
from testbed.mlflow_server import free_port
from testbed.needs import requires

pytestmark = requires("mlflow", reason="kftrain's [mlflow] extra (make install)")
LIMIT_S = 10.0


@contextlib.contextmanager
def nothing_listening() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


@contextlib.contextmanager
def never_answers() -> Iterator[str]:
    """A socket that listens and never accepts: a connection completes in the kernel, no answer ever comes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


class _Refuses(http.server.BaseHTTPRequestHandler):
    def _refuse(self) -> None:
        body = b'{"error_code": "UNAUTHENTICATED", "message": "You are not authenticated."}'
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def refuses_credentials() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


SERVERS = {
    "down": (nothing_listening, "cannot be reached"),
    "silent": (never_answers, "cannot be reached"),
    "refuses credentials": (refuses_credentials, "refused the credentials (HTTP 401"),
}


@pytest.mark.parametrize("failure", list(SERVERS))
def test_the_launch_step_fails_within_10s_in_one_line_before_creating_the_job(
    failure, tmp_path, monkeypatch, capfd, no_leftover_processes
):
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import kfp_outputs

    server, why = SERVERS[failure]
    ran = tmp_path / "ran"
    with server() as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("MLFLOW_RUN_ID", "4c0ffee")
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", CANARY)
        started = time.monotonic()
        with pytest.raises(SystemExit) as stopped:
            pytorchjob_launch.python_func(
                model=SimpleNamespace(uri=str(tmp_path / "model"), metadata={}),
                job=str(tmp_path / "job"),
                **kfp_outputs(tmp_path),
                run_id="run-1",
                task_id="task-1",
                backend="local",
                command=["python", "-c", f"open({str(ran)!r}, 'w')"],
            )
        took = time.monotonic() - started
    err = capfd.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("ERROR")]
    assert stopped.value.code == 2 and took < LIMIT_S, (took, err)
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"ERROR: MLFLOW_TRACKING_URI: the MLflow tracking server {uri} {why}"), errors
    assert CANARY not in err
    assert not ran.exists() and not (tmp_path / "job").exists()  # no job was created


def test_a_local_pipeline_run_ends_before_its_first_step_when_the_server_is_down(tmp_path, monkeypatch):
    with nothing_listening() as uri:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        started = time.monotonic()
        with (
            pytest.raises(TrackingError, match=r"^MLFLOW_TRACKING_URI: the MLflow tracking server .* cannot be"),
            tracked_pipeline(tmp_path),
        ):
            pytest.fail("the pipeline ran")
    assert time.monotonic() - started < LIMIT_S

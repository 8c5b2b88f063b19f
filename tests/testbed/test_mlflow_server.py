"""``python -m testbed.mlflow_server FOLDER``: the tracking server ``make install`` provides, started for a reader to
try ``kftrain run --mlflow`` on; it prints the URI to pass and stops, its whole process group, on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from testbed.mlflow_server import INSTALL, MLFLOW
from testbed.reference import REPO


def test_it_prints_the_uri_to_pass_to_mlflow_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    if not MLFLOW.exists():
        pytest.skip(f"no MLflow tracking server at {MLFLOW} ({INSTALL})")
    server = subprocess.Popen(
        [sys.executable, "-m", "testbed.mlflow_server", str(tmp_path / "data")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        said = "".join(next(server.stdout) for _ in range(2)) if server.stdout else ""
        hint = r"MLflow tracking server: (http://127\.0\.0\.1:\d+) \(.+\)\. Try:\n"
        hint += r"  kftrain run pytorch-digits --mlflow \1\n"
        found = re.fullmatch(hint, said)
        assert found, said
        uri = found.group(1)
        with urllib.request.urlopen(f"{uri}/health", timeout=10) as answer:
            assert answer.status == 200
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
        assert (tmp_path / "data" / "mlflow.db").exists()  # what it kept stays
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

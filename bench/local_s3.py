"""A local S3 server for the benchmarks that need one (``bench_storage.py``, ``programs/checkpoint_stall.py``).

``start_moto()`` starts ``moto_server`` on a free local port and returns the process and its endpoint once it
answers; ``stop_moto(proc)`` ends it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen(
        [*cmd, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return proc, endpoint
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"moto_server did not start on {endpoint}")


def stop_moto(proc: subprocess.Popen[bytes] | None) -> None:
    """``proc`` (from :func:`start_moto`) killed and waited for; None (no server was started) does nothing."""
    if proc is not None:
        proc.kill()
        proc.wait()

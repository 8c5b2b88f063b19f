"""``kftrain jobs delete`` signals only the job's own launcher: the process holding the lock on the job's name
(:func:`kftrain.backends.local.state.name_holder`), whatever the record says. A forged record naming another live
process of this user's (its pid and start time copied) signals nothing; a garbage record does not hide the job that
runs: its launcher is stopped before "deleted"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV

# A launcher as far as the lock goes: it holds .<name>.lock as claim_name does, and says so.
HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


@pytest.fixture
def processes() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*argv: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _identity(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return {"launcher_pid": proc.pid, "launcher_started": psutil.Process(proc.pid).create_time()}


# (id, the record's fields given (the bystander, the launcher), whether there is a launcher holding the lock)
CASES: list[tuple[str, Callable[[Any, Any], dict[str, Any] | str], bool]] = [
    ("forged-naming-a-bystander", lambda bystander, launcher: {"phase": "Running", **_identity(bystander)}, False),
    ("forged-while-the-job-runs", lambda bystander, launcher: {"phase": "Running", **_identity(bystander)}, True),
    ("garbage-while-the-job-runs", lambda bystander, launcher: "{not json", True),
    ("wrongly-typed-while-the-job-runs", lambda bystander, launcher: {"phase": "Running", "launcher_pid": "x"}, True),
    ("says-ended-while-the-job-runs", lambda bystander, launcher: {"phase": "Succeeded"}, True),
    ("the-launchers-own", lambda bystander, launcher: {"phase": "Running", **_identity(launcher)}, True),
]


@pytest.mark.parametrize(("case", "fields", "running"), CASES, ids=[c[0] for c in CASES])
def test_delete_stops_the_lock_holder_and_nothing_else(
    state: Path, processes: Callable[..., subprocess.Popen[str]], case: str, fields: Any, running: bool
) -> None:
    bystander = processes("-c", "import time; time.sleep(120)")
    launcher = processes("-c", HOLD, str(state / ".job.lock")) if running else None
    if launcher is not None:
        assert launcher.stdout is not None and launcher.stdout.readline() == "held\n"
        assert local_state.name_holder("job") is not None and local_state.name_holder("job").pid == launcher.pid
    given = fields(bystander, launcher or bystander)
    text = given if isinstance(given, str) else json.dumps({"name": "job", "created": time.time(), **given})
    (state / "job.json").write_text(text)
    local_jobs.delete_job("job")
    if launcher is not None:
        assert launcher.wait(timeout=30) == -signal.SIGTERM
    time.sleep(0.3)
    assert bystander.poll() is None  # never signalled
    assert not (state / "job.json").exists()
    assert local_state.name_holder("job") is None


def test_no_lock_holder_when_none_holds_it(state: Path) -> None:
    (state / ".job.lock").write_text("")
    assert local_state.name_holder("job") is None

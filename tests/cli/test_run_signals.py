"""``kftrain run`` itself sent SIGTERM or SIGHUP (not its whole process group, as a terminal's Ctrl-C): the launch step
and its replicas end too, the job's record is not left Running, and the run exits 143 with one line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.cli.isolated import descendants, start_time
from kftrain.signals import Terminated

SLEEPING_JOB = """
from kfp import dsl
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch

@dsl.pipeline(name="sleeping-job")
def sleeping_job() -> None:
    pytorchjob_launch(command=["python", "train.py"], workers=1, shm_size="", restart_policy="Never", backoff_limit=0)
"""
SLEEPING_TRAIN = """
import pathlib, time
pathlib.Path({marker!r}).write_text("started")
time.sleep(600)
"""


def _records(state: Path) -> list[dict[str, object]]:
    found = []
    for path in state.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if isinstance(record, dict) and "phase" in record:
                found.append(record)
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_kftrain_run_ends_its_steps_and_their_job(tmp_path: Path, sig: signal.Signals) -> None:
    folder, tmp, state = tmp_path / "project", tmp_path / "tmp", tmp_path / "state"
    folder.mkdir()
    tmp.mkdir()
    marker = tmp_path / "started"
    (folder / "sleeping.py").write_text(textwrap.dedent(SLEEPING_JOB))
    (folder / "train.py").write_text(textwrap.dedent(SLEEPING_TRAIN.format(marker=str(marker))))
    script = Path(sys.executable).with_name("kftrain")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kftrain.cli"]
    env = {**os.environ, "TMPDIR": str(tmp), STATE_DIR_ENV: str(state)}
    run = subprocess.Popen(
        [*command, "run", "sleeping:sleeping_job", "--pipeline-root", str(folder / "runs")],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a signal to kftrain alone, as `kill PID` sends it
    )
    below: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the replica never started"
        below = descendants(run.pid)
        assert len(below) >= 3, below  # the step's shell and Python, the replica (and its supervisor)
        assert any(r.get("phase") == "Running" for r in _records(state)), _records(state)

        os.kill(run.pid, sig)
        out, err = run.communicate(timeout=60)
        assert run.returncode == 128 + sig, out + err
        assert err.strip().splitlines()[-1].startswith("[kftrain] terminated"), err
        left = [pid for pid, started in below.items() if start_time(pid) == started]
        ends = time.monotonic() + 10  # reparented ones may need their new parent to reap them
        while left and time.monotonic() < ends:
            time.sleep(0.1)
            left = [pid for pid, started in below.items() if start_time(pid) == started and _running(pid)]
        assert left == [], f"still running after kftrain run ended: {left}"
        records = _records(state)
        assert records and all(r.get("phase") != "Running" for r in records), records
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        for pid, started in {**below, **descendants(run.pid)}.items():
            if start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        run.communicate()


def _running(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    return False


STUBBORN_STEP = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def test_a_step_that_ignores_the_signal_is_killed_after_the_grace_and_no_later_step_starts() -> None:
    from kfp.local import subprocess_task_handler as handler

    from kftrain.cli.run_signals import stop_steps_on_signal

    signaller = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    started, before = time.monotonic(), signal.getsignal(signal.SIGTERM)
    # What this test process ran before (a session's S3 or MLflow server, under xdist): not the step's.
    already = descendants(os.getpid())
    with stop_steps_on_signal(grace_s=1.0):
        signaller.start()
        with pytest.raises(Terminated) as stopped:
            handler.run_local_subprocess(["sh", "-c", f'{sys.executable} -c "{STUBBORN_STEP}"'])
        assert stopped.value.exit_code == 143
        with pytest.raises(Terminated):  # the next step is not started
            handler.run_local_subprocess(["sh", "-c", "exit 0"])
    assert time.monotonic() - started < 30  # the step's own sleep is 600 s: it was killed
    assert descendants(os.getpid()).items() <= already.items()
    assert signal.getsignal(signal.SIGTERM) == before
    assert handler.run_local_subprocess(["sh", "-c", "exit 0"]) == 0  # KFP's own again, outside the block

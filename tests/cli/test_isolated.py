"""A user's pipeline module run at compile time cannot make ``kftrain compile``, ``submit`` or ``run`` lie, hang or
leave processes: each side effect at import, through the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kftrain.cli.isolated import compile_isolated, stop_tagged, tagged_processes
from kftrain.errors import KftrainError
from testbed.user_modules import ONE_STEP_PIPELINE as PIPELINE

PIDS = "pids.txt"  # where a module that starts processes writes their PIDs
START = f"""
import subprocess
for argv in (["sleep", "3600"], ["setsid", "sleep", "3600"]):
    with open({PIDS!r}, "a") as out:
        out.write(f"{{subprocess.Popen(argv).pid}}\\n")
"""

# (what the module does at import, the error (None: it compiles), a warning on stderr)
CASES = {
    "os-exit-0": ("import os\nos._exit(0)\n", "ended the process (exit status 0) before its pipeline was compiled", ""),
    "os-exit-3": ("import os\nos._exit(3)\n", "ended the process (exit status 3)", ""),
    "sys-exit": ("import sys\nsys.exit(0)\n", "called sys.exit(0)", ""),
    "kill-itself": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "exit status -9", ""),
    "non-daemon-thread": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n",
        None,
        "",
    ),
    "child-processes": (START, None, "started process(es)"),
}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _started(folder: Path) -> list[int]:
    pids = folder / PIDS
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


def _kftrain(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kftrain.cli", *argv], capture_output=True, text=True, cwd=folder, timeout=240
    )


@pytest.mark.parametrize("case", list(CASES))
def test_compile_of_a_module_with_side_effects_at_import(tmp_path: Path, case: str) -> None:
    """``kftrain compile mine.py:mine -o out.yaml``: exit status 0 only with the file written, it ends, and no
    process the module started is left running (also one that left the process group with setsid)."""
    effect, error, warning = CASES[case]
    (tmp_path / "mine.py").write_text(PIPELINE + effect)
    started = time.monotonic()
    proc = _kftrain(tmp_path, "compile", "mine.py:mine", "-o", "out.yaml")
    try:
        assert time.monotonic() - started < 200
        if error is None:
            assert proc.returncode == 0, proc.stderr
            assert "pipelineInfo" in (tmp_path / "out.yaml").read_text()
        else:
            assert proc.returncode == 2, proc.stderr
            assert not (tmp_path / "out.yaml").exists()
            (line,) = [x for x in proc.stderr.splitlines() if x.startswith("kftrain: error:")]
            assert "mine.py:mine" in line and error in line, proc.stderr
        assert warning in proc.stderr
        assert [pid for pid in _started(tmp_path) if _alive(pid)] == []
    finally:
        for pid in _started(tmp_path):
            if _alive(pid):
                os.kill(pid, 9)


def test_a_module_that_waits_at_import_is_stopped_at_the_deadline(tmp_path: Path, monkeypatch) -> None:
    """A module that never finishes importing is stopped, with what it started, and named."""
    (tmp_path / "mine.py").write_text(PIPELINE + START + "import time\ntime.sleep(3600)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KftrainError, match=r"mine\.py:mine: importing mine\.py did not finish within 30s"):
        compile_isolated("mine.py:mine", tmp_path / "out.yaml", for_cluster=False, deadline_s=30)
    assert [pid for pid in _started(tmp_path) if _alive(pid)] == []


def test_run_reports_an_exit_at_import(tmp_path: Path) -> None:
    """``kftrain run`` imports the module in a child first: an ``os._exit(0)`` there is an error, not a silent 0."""
    (tmp_path / "mine.py").write_text(PIPELINE + "import os\nos._exit(0)\n")
    proc = _kftrain(tmp_path, "run", "mine.py:mine", "--pipeline-root", "runs")
    assert proc.returncode == 2, proc.stderr
    assert "importing mine.py ended the process (exit status 0)" in proc.stderr


# A fork that runs no program: its environment is its parent's first one, without the import's tag.
FORK = f"""
import os, time
pid = os.fork()
if pid == 0:
    time.sleep(3600)
    os._exit(0)
with open({PIDS!r}, "a") as out:
    out.write(f"{{pid}}\\n")
"""


@pytest.mark.parametrize(("started", "count"), [(START, 4), (FORK, 2)], ids=["programs", "a fork"])
def test_run_stops_the_processes_a_module_started_at_import(started: str, count: int, tmp_path: Path) -> None:
    """``kftrain run`` imports the module in this process too; what it started there is stopped when the run ends."""
    (tmp_path / "mine.py").write_text(PIPELINE + started)
    proc = _kftrain(tmp_path, "run", "mine.py:mine", "--pipeline-root", "runs")
    try:
        assert proc.returncode == 0, proc.stderr
        assert "started process(es)" in proc.stderr
        assert len(_started(tmp_path)) == count  # as many in the child that checked it as in the run itself
        assert [pid for pid in _started(tmp_path) if _alive(pid)] == []
    finally:
        for pid in _started(tmp_path):
            if _alive(pid):
                os.kill(pid, 9)


def test_run_ends_with_a_thread_the_module_started_at_import(tmp_path: Path) -> None:
    """A non-daemon thread started at import does not keep ``kftrain run`` from ending once the pipeline has run."""
    (tmp_path / "mine.py").write_text(PIPELINE + CASES["non-daemon-thread"][0])
    proc = _kftrain(tmp_path, "run", "mine.py:mine", "--pipeline-root", "runs")
    assert proc.returncode == 0, proc.stderr
    assert "pipeline mine.py:mine succeeded" in proc.stdout
    assert "importing mine.py started thread(s) Thread-1 (sleep), still running" in proc.stderr


def test_only_the_tokens_processes_are_stopped(tmp_path: Path) -> None:
    """:func:`stop_tagged` finds processes by the token in their environment: another process is left alone."""
    tagged = subprocess.Popen(["sleep", "60"], env={**os.environ, "KFTRAIN_IMPORT_TOKEN": "t1"})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, "KFTRAIN_IMPORT_TOKEN": "t2"})
    try:
        assert tagged_processes("t1") == [tagged.pid]
        assert stop_tagged("t1") == [tagged.pid]
        assert tagged.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for proc in (tagged, other):
            proc.kill()
            proc.wait()

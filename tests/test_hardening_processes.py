"""No replica process outlives ``kftrain launch --local``, however it ends, and its output never hangs it.

Every process a case starts carries a marker in its environment (each replica declares ``HARDEN_MARK``,
which its children inherit); a case passes only when no live process on the machine carries it. The
replicas make stopping hard: they ignore SIGTERM, start a child that ignores it too, and start a daemon
that leaves their session (double fork and setsid).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import backend as local_backend
from kftrain.job import load_manifest
from tests.conftest import pytorchjob, replica
from tests.polling import wait_until

PY = sys.executable
GRACE_S = 1  # terminationGracePeriodSeconds of every replica here: SIGKILL follows SIGTERM after a second

# Ignores SIGTERM; starts a child that ignores it too and a daemon outside its session; then says "ready".
STUBBORN = """
import os, signal, subprocess, sys, time
term = os.path.join(os.environ["OUT"], "term-" + os.environ["POD"])
signal.signal(signal.SIGTERM, lambda *a: open(term, "w").close())
ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
subprocess.Popen([sys.executable, "-c", ignore])
if os.fork() == 0:  # a daemon: double fork, new session; its parent exits at once
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
open(os.path.join(os.environ["OUT"], "ready-" + os.environ["POD"]), "w").close()
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""

# Exits 0 at once, leaving a daemon and a plain background child behind.
LEAVER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
print("done", flush=True)
"""


def marked(mark: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``mark``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("HARDEN_MARK") == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def mark() -> str:
    value = uuid.uuid4().hex
    yield value
    left = marked(value)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert left == [], f"orphans: {left}"


def _job(tmp_path: Path, mark: str, source: str, workers: int = 2, restart: str = "Never", **env: str) -> Path:
    program = tmp_path / "replica.py"
    program.write_text(textwrap.dedent(source))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    environment = [
        {"name": "HARDEN_MARK", "value": mark},
        {"name": "OUT", "value": str(out)},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *({"name": k, "value": v} for k, v in env.items()),
    ]

    def spec(n: int) -> dict:
        r = replica(n, "pytorch", [PY, str(program)], restart_policy=restart, env=environment)
        r["template"]["spec"]["terminationGracePeriodSeconds"] = GRACE_S
        return r

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(pytorchjob({"Master": spec(1), "Worker": spec(workers)}, name="hyg")))
    return path


def _launch(path: Path, tmp_path: Path, *extra: str, stdout=None, wrapper: tuple[str, ...] = ()) -> subprocess.Popen:
    command = [PY, "-m", "kftrain.cli", "launch", "--local", "-f", str(path), "--workdir", str(tmp_path / "wd")]
    with open(tmp_path / "kftrain.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([*wrapper, *command, *extra], stdout=stdout or log, stderr=log)


def _finish(proc: subprocess.Popen, timeout: float) -> int:
    """``proc``'s exit code; a kftrain that does not end in time is killed (its replicas then stop themselves)."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Runs a command and writes the peak RSS (KiB) of it and its waited-for descendants to argv[1].
PEAK_RSS = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


# (signals sent to kftrain once every replica is ready, its expected exit code; None: killed)
SCENARIOS = {
    "SIGTERM": ([signal.SIGTERM], 143),
    "SIGTERM-twice": ([signal.SIGTERM, signal.SIGTERM], 143),
    "SIGHUP": ([signal.SIGHUP], 129),
    "SIGINT": ([signal.SIGINT], 130),
    "SIGTERM-then-SIGINT": ([signal.SIGTERM, signal.SIGINT], 143),
    "SIGKILL": ([signal.SIGKILL], None),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_no_process_survives_kftrain(scenario: str, tmp_path: Path, mark: str) -> None:
    signals, expected = SCENARIOS[scenario]
    proc = _launch(_job(tmp_path, mark, STUBBORN), tmp_path)
    out = tmp_path / "out"
    try:
        wait_until(lambda: len(list(out.glob("ready-*"))) == 3 or proc.poll() is not None, 60, "replicas to start")
        assert proc.poll() is None, (tmp_path / "kftrain.log").read_text()
        # Master, 2 Workers: each a supervisor, the program, its child and its daemon.
        wait_until(lambda: len(marked(mark)) == 12, 10, "every process to be running")
        proc.send_signal(signals[0])
        if len(signals) > 1:
            # The second signal lands while the replicas are in their grace period (they ignore SIGTERM).
            wait_until(lambda: len(list(out.glob("term-*"))) == 3, 10, "the replicas to get SIGTERM")
            proc.send_signal(signals[1])
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "kftrain.log").read_text()
    if expected is None:
        assert code == -signal.SIGKILL
        # Nothing of kftrain is left to stop them: the supervisors see its pipe close and stop their trees.
        wait_until(lambda: not marked(mark), GRACE_S + 15, "the replicas to be stopped")
    else:
        assert code == expected, log
        assert marked(mark) == [], log  # stopped before kftrain exited, not after
        assert "Traceback" not in log, log


def test_replica_that_exits_leaves_nothing_behind(tmp_path: Path, mark: str) -> None:
    code = _finish(_launch(_job(tmp_path, mark, LEAVER, workers=1), tmp_path), 60)
    assert code == 0, (tmp_path / "kftrain.log").read_text()
    assert marked(mark) == []


def test_failed_start_stops_the_replicas_already_started(tmp_path: Path, mark: str, monkeypatch) -> None:
    """The second replica fails to start (no process could be made): the first must not be left running."""
    job = load_manifest(yaml.safe_load(_job(tmp_path, mark, STUBBORN, workers=1).read_text()))
    real = local_backend.ReplicaProcess
    started: list[object] = []

    def start_once(*args, **kwargs):
        if started:
            raise OSError(11, "Resource temporarily unavailable")  # what fork says when the process limit is hit
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(local_backend, "ReplicaProcess", start_once)
    backend = LocalBackend(LocalConfig(workdir=tmp_path / "wd", out=io.StringIO()))
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        backend.run(job)
    assert len(started) == 1
    assert marked(mark) == []
    assert backend._jobs == {}


def test_program_that_cannot_be_executed_fails_the_job_cleanly(tmp_path: Path, mark: str) -> None:
    """Executable bit set, but no interpreter line: exec fails in the replica, not in kftrain."""
    job = _job(tmp_path, mark, STUBBORN, workers=1)
    bad = tmp_path / "not-a-program"
    bad.write_bytes(b"\x00\x01binary junk")
    bad.chmod(0o755)
    code = _finish(_launch(job, tmp_path, "--command", f"Worker={bad}"), 60)
    log = (tmp_path / "kftrain.log").read_text()
    assert code == 126, log
    assert "worker-0 exited with code 126" in log and "Exec format error" in log, log
    assert "Traceback" not in log
    assert marked(mark) == []


# --- output: a closed console and endless lines ---------------------------------------------------------


TALKER = """
import os, sys
for i in range(int(os.environ["LINES"])):
    print(f"line {i} " + "x" * 100, flush=True)
"""


def test_closed_stdout_does_not_hang_kftrain(tmp_path: Path, mark: str) -> None:
    """``kftrain launch ... | head -c 200``: the job runs to its end, every line still in the log file."""
    proc = _launch(_job(tmp_path, mark, TALKER, workers=0, LINES="20000"), tmp_path, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    head = proc.stdout.read(200)
    proc.stdout.close()  # as head does once it has its 200 bytes
    code = _finish(proc, 120)
    assert head.startswith(b"[kftrain] starting PyTorchJob hyg")
    assert code == 0, (tmp_path / "kftrain.log").read_text()
    assert "Traceback" not in (tmp_path / "kftrain.log").read_text()
    assert (tmp_path / "wd" / "logs" / "master-0.log").read_text().count("\n") == 20000
    assert marked(mark) == []


NO_NEWLINE = """
import os, sys
chunk = "y" * (1 << 20)
for _ in range(int(os.environ["MIB"])):
    sys.stdout.write(chunk)
sys.stdout.flush()
sys.exit(int(os.environ["EXIT"]))
"""


def test_endless_line_keeps_memory_and_messages_bounded(tmp_path: Path, mark: str) -> None:
    """300 MB without a newline pushed kftrain to 1.4 GB; now its memory stays flat and messages short."""
    job = _job(tmp_path, mark, NO_NEWLINE, workers=0, MIB="200", EXIT="3")
    peak = tmp_path / "peak-rss"
    code = _finish(_launch(job, tmp_path, wrapper=(PY, "-c", PEAK_RSS, str(peak))), 300)
    log = (tmp_path / "kftrain.log").read_text()
    assert code == 3, log[-2000:]
    assert (tmp_path / "wd" / "logs" / "master-0.log").stat().st_size == 200 << 20  # the whole line, in the file
    assert len(log) < 100_000, f"{len(log)} bytes of messages"
    assert "line cut: " in log and "more bytes, all of it in" in log
    # The largest of kftrain and its waited-for descendants (the replica writes in 1 MiB pieces).
    peak_mib = int(peak.read_text()) / 1024
    assert peak_mib < 200, f"peak RSS {peak_mib:.0f} MiB"
    assert marked(mark) == []


def test_clean_env_runs_with_only_declared_variables(tmp_path: Path, mark: str, monkeypatch) -> None:
    """--clean-env: a variable of the launching shell does not reach the replica; a declared one does."""
    monkeypatch.setenv("UNDECLARED_SECRET", "from-the-shell")
    source = """
    import os, sys
    print("seen", os.environ.get("UNDECLARED_SECRET"), os.environ.get("OUT") is not None, flush=True)
    """
    job = _job(tmp_path, mark, source, workers=0)
    for flags, seen in (([], "from-the-shell"), (["--clean-env"], "None")):
        code = _finish(_launch(job, tmp_path, *flags), 60)
        log = (tmp_path / "kftrain.log").read_text()
        assert code == 0, log
        assert f"[master-0] seen {seen} True" in log, log
    assert os.environ["UNDECLARED_SECRET"] == "from-the-shell"

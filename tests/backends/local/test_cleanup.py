"""No replica process outlives ``kftrain launch --local``, however it ends: SIGTERM, SIGINT, SIGHUP (once or
twice), SIGKILL, a replica that exits leaving children and daemons behind, a replica that cannot start.

Every process a case starts carries a marker in its environment (each replica declares ``HARDEN_MARK``,
which its children inherit); a case passes only when no live process on the machine carries it. The
replicas make stopping hard: they ignore SIGTERM, start a child that ignores it too, and start a daemon
that leaves their session (double fork and setsid)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import backend as local_backend
from kftrain.job import load_manifest
from testbed.local_harness import GRACE_S, alive, finish, launch_cli, marked, marked_job, pod_env, program, rep
from testbed.manifests import tfjob
from testbed.polling import wait_until

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")


# Sleeps, with a grandchild; writes "pid grandchild_pid" to $OUT_DIR/$POD_NAME.pids.
SPAWNER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
out = os.environ["OUT_DIR"]
tmp = os.path.join(out, os.environ["POD_NAME"] + ".tmp")
open(tmp, "w").write(f"{os.getpid()} {child.pid}")
os.rename(tmp, tmp[:-4] + ".pids")
time.sleep(60)
"""


DRIVER = """
import json, sys
from pathlib import Path
from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from kftrain.signals import terminate_raises
job = load_manifest(json.loads(Path(sys.argv[1]).read_text()))
with terminate_raises():
    result = LocalBackend(LocalConfig(workdir=Path(sys.argv[2]), grace_period_s=2.0)).run(job)
sys.exit(0 if result.succeeded else 5)
"""


def test_sigterm_stops_every_replica_and_grandchild(tmp_path, out_dir):
    cmd = program(tmp_path, "spawner", SPAWNER)
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, pod_env(out_dir))}, name="term")
    manifest_path = tmp_path / "job.json"
    manifest_path.write_text(json.dumps(m))
    driver = program(tmp_path, "driver", DRIVER)
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*driver, str(manifest_path), str(tmp_path / "wd")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while len(list(out_dir.glob("*.pids"))) < 2:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "replicas did not start: " + log_path.read_text()
            time.sleep(0.05)
        pids = [int(p) for f in out_dir.glob("*.pids") for p in f.read_text().split()]
        assert len(pids) == 4 and all(alive(p) for p in pids)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, log_path.read_text()
    deadline = time.monotonic() + 2
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == [], log_path.read_text()
    assert "Terminated" in log_path.read_text()


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
    proc = launch_cli(marked_job(tmp_path, mark, STUBBORN), tmp_path)
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
    code = finish(launch_cli(marked_job(tmp_path, mark, LEAVER, workers=1), tmp_path), 60)
    assert code == 0, (tmp_path / "kftrain.log").read_text()
    assert marked(mark) == []


def test_failed_start_stops_the_replicas_already_started(tmp_path: Path, mark: str, monkeypatch) -> None:
    """The second replica fails to start (no process could be made): the first must not be left running."""
    job = load_manifest(yaml.safe_load(marked_job(tmp_path, mark, STUBBORN, workers=1).read_text()))
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
    # The backend kept no record of the job: submitted again, it starts it again (and fails the same way) rather
    # than attaching to a job it believes is running.
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        backend.submit(job)
    assert len(started) == 1 and marked(mark) == []


def test_program_that_cannot_be_executed_fails_the_job_cleanly(tmp_path: Path, mark: str) -> None:
    """Executable bit set, but no interpreter line: exec fails in the replica, not in kftrain."""
    job = marked_job(tmp_path, mark, STUBBORN, workers=1)
    bad = tmp_path / "not-a-program"
    bad.write_bytes(b"\x00\x01binary junk")
    bad.chmod(0o755)
    code = finish(launch_cli(job, tmp_path, "--command", f"Worker={bad}"), 60)
    log = (tmp_path / "kftrain.log").read_text()
    assert code == 126, log
    assert "worker-0 exited with code 126" in log and "Exec format error" in log, log
    assert "Traceback" not in log
    assert marked(mark) == []

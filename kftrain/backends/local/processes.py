"""Processes of local replicas: each replica runs under its own supervisor (:mod:`.supervisor`), which leads
a new session, so the replica and everything it started (torchrun's workers, mpirun's ranks, a stray
background child) are stopped as one, and none of them outlives kftrain, however kftrain ends.

kftrain holds the write end of a pipe whose read end is the supervisor's standard input; the kernel closes
it when kftrain exits for any reason (SIGKILL included), and the supervisor then stops the replica's tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

SUPERVISOR = Path(__file__).with_name("supervisor.py")
# The supervisor needs a moment beyond the grace period to send SIGKILL and collect what it killed.
_SUPERVISOR_MARGIN_S = 5.0


class ReplicaProcess:
    """One replica's program, started under its supervisor; ``pid`` is the supervisor's (the session leader)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, grace_s: float) -> None:
        watch_r, self._watch_w = os.pipe()  # both ends close-on-exec: no other child inherits kftrain's end
        self._release_lock = threading.Lock()  # poll() (the waiting thread) and a stop (any thread) both release
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SUPERVISOR), repr(float(grace_s)), "--", *argv],
                env=dict(env),
                cwd=cwd,
                stdin=watch_r,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            os.close(self._watch_w)
            raise
        finally:
            os.close(watch_r)
        self.grace_s = grace_s

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdout(self) -> IO[bytes]:
        assert self.popen.stdout is not None
        return self.popen.stdout

    def poll(self) -> int | None:
        code = self.popen.poll()
        if code is not None:
            self._release()
        return code

    def program_tree(self) -> list[psutil.Process]:
        """The replica's own processes: the supervisor's descendants, not the supervisor."""
        return process_tree(self.pid)[1:]

    def _release(self) -> None:
        with self._release_lock:
            if self._watch_w >= 0:
                os.close(self._watch_w)
                self._watch_w = -1


def stop_replicas(procs: Sequence[ReplicaProcess]) -> dict[int, int]:
    """Stop each replica's whole tree, as the kubelet stops a pod: SIGTERM, then SIGKILL after its grace period.

    The supervisors do both; one that does not end in time (it was stopped itself) is killed with its
    session from here. Safe to call again for the same processes. Returns each supervisor's exit status
    by pid (the program's own status).
    """
    for proc in procs:
        if proc.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + max((p.grace_s for p in procs), default=0.0) + _SUPERVISOR_MARGIN_S
    codes: dict[int, int] = {}
    for proc in procs:
        try:
            code = proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # a supervisor that was SIGSTOPped, or cannot run
            for member in process_tree(proc.pid):
                kill_quietly(member)
            signal_group(proc.pid, signal.SIGKILL)
            code = proc.popen.wait()
        proc._release()
        codes[proc.pid] = code
    return codes


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants (empty if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group of a session leader (its group id is its pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_quietly(proc: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        proc.kill()


def shell_exit_code(code: int) -> int:
    """Python reports death by signal N as -N; shells and Kubernetes report 128+N."""
    return 128 - code if code < 0 else code

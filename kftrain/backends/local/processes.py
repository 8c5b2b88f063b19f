"""Process trees of local replicas: each replica leads its own session, so it and everything it started
(torchrun's workers, mpirun's ranks) can be signalled as one."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil


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


def signal_tree(pid: int, sig: signal.Signals) -> None:
    """Signal every process of the tree rooted at ``pid``, wherever its process group is."""
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def kill_quietly(proc: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        proc.kill()


def shell_exit_code(code: int) -> int:
    """Python reports death by signal N as -N; shells and Kubernetes report 128+N."""
    return 128 - code if code < 0 else code

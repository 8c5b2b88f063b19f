"""The supervisor of one local replica: it ties the replica's whole process tree to kftrain's lifetime.

kftrain starts ``python -I -S supervisor.py GRACE_SECONDS -- PROGRAM ARGS...`` as a session leader whose standard
input is a pipe only kftrain holds. A child subreaper, it adopts every process of the tree and ends it as the kubelet
ends a pod: the program exits, what it left is killed and the supervisor exits with its status; SIGTERM, SIGINT,
SIGHUP or end of input (kftrain is gone, even by SIGKILL), SIGTERM to the tree, then SIGKILL after the grace period.
Standard library only, it passes its environment (the replica's) unchanged; a program that cannot start exits 127
(not found) or 126 (not executable), as a shell does.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import select
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _become_subreaper() -> None:
    """Adopt orphaned descendants instead of letting them go to init, where no one would stop them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the session still holds every process that did not leave it


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of ``root``, from /proc; parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # it exited while we looked
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal_all(sig: signal.Signals) -> int:
    """Send ``sig`` to every live descendant; how many there were."""
    pids = _descendants(os.getpid())
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    return len(pids)


def _reap(program: subprocess.Popen[bytes], status: list[int]) -> None:
    """Collect every child that ended (the program, and adopted orphans); record the program's status."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == program.pid:
            code = os.waitstatus_to_exitcode(wait_status)
            program.returncode = code
            status.append(code)


def _exit_as(code: int) -> None:
    """Exit with the program's status: its exit code, or death by the same signal (without a core file)."""
    sys.stdout.flush()
    if code >= 0:
        os._exit(code)
    sig = -code
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    try:
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP cannot be caught or blocked: already default
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal that does not kill (none of those a program dies of)


def supervise(grace_s: float, argv: list[str]) -> None:
    _become_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # every signal below also wakes the select()
    stop_requested: list[int] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: stop_requested.append(signum))
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    try:
        program = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:
        name = argv[0] if argv else ""
        print(f"kftrain: cannot run {name!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        _exit_as(127 if exc.errno == errno.ENOENT else 126)
        return
    status: list[int] = []
    watching = True  # standard input is kftrain's pipe; its end of file means kftrain is gone
    kill_at: float | None = None
    while True:
        _reap(program, status)
        if status:
            # The program ended: nothing it left behind outlives it, as nothing outlives a container's main process.
            while _signal_all(signal.SIGKILL):
                time.sleep(0.01)
                _reap(program, status)
            _exit_as(status[0])
        if stop_requested and kill_at is None:
            _signal_all(signal.SIGTERM)
            kill_at = time.monotonic() + grace_s
        if kill_at is not None and time.monotonic() >= kill_at:
            _signal_all(signal.SIGKILL)
        timeout = 0.5 if kill_at is None else max(0.0, min(0.5, kill_at - time.monotonic()))
        readable, _, _ = select.select([wake_r, 0] if watching else [wake_r], [], [], timeout)
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        if 0 in readable and not os.read(0, 4096):
            watching = False
            stop_requested.append(0)  # kftrain is gone: stop everything, as if told to


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        print("usage: supervisor.py GRACE_SECONDS -- PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    supervise(float(args[0]), args[2:])


if __name__ == "__main__":
    main(sys.argv[1:])

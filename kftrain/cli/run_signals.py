"""``kftrain run`` sent SIGTERM or SIGHUP ends its steps, not just itself: the step running then is sent the signal,
has :data:`STEP_GRACE_S` to stop its job (the local backend stops the replicas and marks the record), then what is
left of it is SIGKILLed; no later step starts, and the run ends with :class:`~kftrain.signals.Terminated` (143).

KFP's local runner starts each step with ``subprocess.Popen`` in this process's group, through
``run_local_subprocess`` (kubeflow/pipelines@2.17.0:sdk/python/kfp/local/subprocess_task_handler.py), which
:func:`stop_steps_on_signal` wraps. A step's processes are those below this one that appeared while it ran,
matched by PID and start time (:func:`kftrain.cli.isolated.descendants`); only those still in this process group
are signalled (the step's shell and Python; replicas run in sessions of their own and are the step's to stop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from kftrain.cli.isolated import descendants, start_time
from kftrain.signals import STOP_SIGNALS, Terminated

# How long a signalled step has to stop its job: more than a replica's grace (5 s by default) and the step's own
# clean-up, after which what is left of it is killed.
STEP_GRACE_S = 30.0


class StepStopper:
    """Tracks the step running now and, on a stop signal, stops it (see the module's docstring)."""

    def __init__(self, grace_s: float = STEP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.signum: int | None = None
        self.before: dict[int, str] | None = None  # this process's descendants when the running step started
        self.step: dict[int, str] = {}
        self.killer: threading.Timer | None = None

    def run_step(self, plain: Any, *args: Any, **kwargs: Any) -> int:
        """``plain(...)`` (KFP's ``run_local_subprocess``), unless a stop signal came; then Terminated."""
        self._raise_if_stopping()
        self.before = descendants(os.getpid())
        try:
            return int(plain(*args, **kwargs))
        finally:
            self.before = None
            if self.killer is not None:
                self.killer.cancel()
            self._raise_if_stopping()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # a stop has begun: a second signal must not cut it short
        self.signum = signum
        if self.before is None:
            raise Terminated(signum)  # between steps: nothing to wait for
        self.step = self._started_by_step()
        group = os.getpgrp()
        for pid in self.step:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == group:
                    os.kill(pid, signum)
        self.killer = threading.Timer(self.grace_s, self._kill_left)
        self.killer.daemon = True
        self.killer.start()
        # The main thread goes on reading the step's output until it ends; run_step then raises Terminated.

    def _started_by_step(self) -> dict[int, str]:
        before = self.before or {}
        return {pid: at for pid, at in descendants(os.getpid()).items() if before.get(pid) != at}

    def _kill_left(self) -> None:
        """After the grace: SIGKILL every process of the step still running (those it started since included)."""
        left = {**self.step, **self._started_by_step()}
        for pid, started in left.items():
            if start_time(pid) == started:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _raise_if_stopping(self) -> None:
        if self.signum is not None:
            raise Terminated(self.signum)


@contextlib.contextmanager
def stop_steps_on_signal(grace_s: float = STEP_GRACE_S) -> Iterator[StepStopper]:
    """Within the block, SIGTERM and SIGHUP stop the KFP step running (if any) and raise Terminated."""
    if threading.current_thread() is not threading.main_thread():
        yield StepStopper(grace_s)
        return
    from kfp.local import subprocess_task_handler as handler

    stopper = StepStopper(grace_s)
    plain = handler.run_local_subprocess

    def wrapped(*args: Any, **kwargs: Any) -> int:
        return stopper.run_step(plain, *args, **kwargs)

    handler.run_local_subprocess = wrapped
    previous = {sig: signal.signal(sig, stopper.on_signal) for sig in STOP_SIGNALS}
    try:
        yield stopper
    finally:
        for sig, handler_was in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler_was is None else handler_was)
        handler.run_local_subprocess = plain

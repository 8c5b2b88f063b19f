"""Turn SIGTERM and SIGHUP into an exception so a cancelled step stops what it started, and keep a stop that
has begun from being cut short by the next signal.

SIGHUP (the terminal was closed) ends a run as SIGTERM does. While stopping (:func:`shielded`), further
SIGTERM, SIGHUP and SIGINT are noted and ignored: a second Ctrl-C or a repeated SIGTERM during the grace
period must not leave the replicas half-stopped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

# The longest the main thread blocks in one go while it waits for an event: how late a signal that did not wake it
# may be handled (see :func:`wait_for`).
SIGNAL_LATENCY_S = 0.1


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM (run cancelled, pod evicted) or SIGHUP."""

    exit_code = 143  # 128 + SIGTERM; an instance carries its own signal's

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


@contextlib.contextmanager
def shielded() -> Iterator[list[int]]:
    """Within the block, SIGTERM, SIGHUP and SIGINT are recorded (the list yielded) instead of interrupting it."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {
        sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in (*STOP_SIGNALS, signal.SIGINT)
    }
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


def wait_for(event: threading.Event, seconds: float | None) -> bool:
    """``event.wait(seconds)``, in slices of at most :data:`SIGNAL_LATENCY_S`, so that a signal is handled within
    that long even when it does not wake the waiting thread.

    A Python signal handler runs only in the main thread, between bytecodes: the C handler just marks the signal
    (python/cpython@v3.11.7:Modules/signalmodule.c, trip_signal). A blocked lock wait returns early only when the
    signal interrupts that very thread's system call, which it does not when the signal lands on another thread
    (a ``kill`` sent from one), or on the main thread after its last check and before it blocks. A single hour-long
    ``event.wait`` then keeps the handler pending for the hour: a cancelled step went on waiting.
    """
    end = None if seconds is None else time.monotonic() + seconds
    while True:
        left = SIGNAL_LATENCY_S if end is None else min(SIGNAL_LATENCY_S, end - time.monotonic())
        if left <= 0:
            return event.is_set()
        if event.wait(left):
            return True

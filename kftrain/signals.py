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
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


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

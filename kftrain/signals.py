"""Turn SIGTERM into an exception so a cancelled step stops what it started."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(BaseException):
    """Raised in the main thread when the process receives SIGTERM (run cancelled, pod evicted)."""

    exit_code = 143


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"received signal {signum}")


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""Waiting in a test for something another process or thread does: a condition polled until a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` if it is not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)

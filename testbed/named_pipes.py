"""Calls that may block on a named pipe (a FIFO given where a file belongs), run so that a test never hangs: the
call runs on a thread given a deadline, after which the pipe is opened for writing and closed (the blocked reader
sees the end of the file and returns) and the test fails, naming the pipe."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def within(seconds: float, pipe: Path, call: Callable[[], Any]) -> Any:
    """``call()``'s result, or the exception it raised (returned, for the test to check), within ``seconds``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the test, which says what it expected
            outcome["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if pipe.is_fifo():
            os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))  # the reader is there: this open does not fail
        thread.join(10)
        pytest.fail(f"reading {pipe} did not end within {seconds} s")
    return outcome["result"]

"""Where a backend's output goes: its own messages (``[kftrain] ...``) and every replica's log lines
(``[worker-1] ...``), one whole line at a time from any thread.

A console that goes away (``kftrain launch ... | head`` closed the pipe) stops being written to, and
nothing else changes: the job runs on, every replica's log file is still written, the end is reported by
the exit code.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO


class Console:
    def __init__(self, out: IO[str] | None = None, sinks: Sequence[Callable[[str, str], None]] = ()) -> None:
        self._out = out
        self._sinks = tuple(sinks)  # also given every replica line: see BackendConfig.line_sinks
        self._lock = threading.Lock()
        self.closed = False  # the stream refused a write: nothing more is written to it

    @property
    def stream(self) -> IO[str]:
        return self._out or sys.stdout

    def say(self, message: str) -> None:
        self.write(f"[kftrain] {message}\n")

    def replica_line(self, label: str, line: str) -> None:
        self.write(f"[{label}] {line}\n")
        for sink in self._sinks:
            with contextlib.suppress(Exception):  # what watches the output must never end the job
                sink(label, line)

    def write(self, text: str) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # BrokenPipeError, or a stream closed under us
                self.closed = True

"""Where a backend's output goes: its own messages (``[kftrain] ...``) and every replica's log lines
(``[worker-1] ...``), one whole line at a time from any thread."""

from __future__ import annotations

import sys
import threading
from typing import IO


class Console:
    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out
        self._lock = threading.Lock()

    @property
    def stream(self) -> IO[str]:
        return self._out or sys.stdout

    def say(self, message: str) -> None:
        self.write(f"[kftrain] {message}\n")

    def replica_line(self, label: str, line: str) -> None:
        self.write(f"[{label}] {line}\n")

    def write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

"""A rate-limited progress reporter for long loops (uploads, shards, epochs); standard library only.

``Progress(total=1000, label="shards")``, ``update(n)`` per item, ``close()``: at most one line per ``every_seconds``
(and at the total or ``close``), ``shards: 40% (400/1000) 123.4/s eta 5s``; ``total=None`` gives
``shards: 400 123.4/s``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO


def format_duration(seconds: float) -> str:
    """``5s``, ``2m05s``, ``1h02m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Counts work done and reports it to ``stream`` at most once every ``every_seconds``."""

    def __init__(
        self,
        total: int | None,
        label: str,
        every_seconds: float = 5.0,
        stream: TextIO | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is not None and total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if every_seconds < 0:
            raise ValueError(f"every_seconds must be >= 0, got {every_seconds}")
        self.total = total
        self.label = label
        self.every_seconds = every_seconds
        self.stream = stream
        self.clock = clock
        self.done = 0
        self.started = clock()
        self.last_report = self.started
        self.reported_done: int | None = None  # ``done`` at the last line written
        self.lines = 0

    # -- counting --------------------------------------------------------------------------------

    def update(self, n: int = 1) -> None:
        """Add ``n`` units of work; report when the interval has passed or the total is reached."""
        self.done += n
        now = self.clock()
        finished = self.total is not None and self.done >= self.total
        if finished or now - self.last_report >= self.every_seconds:
            self._report(now)

    def __call__(self, n: int) -> None:
        """A Progress is also a byte-count callback, as ``kftrain.storage`` transfers take."""
        self.update(n)

    def close(self) -> None:
        """Report the final count unless the last line already showed it."""
        if self.reported_done != self.done:
            self._report(self.clock())

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- reporting -------------------------------------------------------------------------------

    @property
    def rate(self) -> float:
        """Units per second since the start (0 before any time has passed)."""
        elapsed = self.clock() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"{self.label}: {self.done} {rate:.1f}/s"
        percent = 100.0 if self.total == 0 else 100.0 * self.done / self.total
        text = f"{self.label}: {percent:.0f}% ({self.done}/{self.total}) {rate:.1f}/s"
        remaining = self.total - self.done
        if remaining <= 0:
            return f"{text} in {format_duration(elapsed)}"
        eta = format_duration(remaining / rate) if rate > 0 else "?"
        return f"{text} eta {eta}"

    def _report(self, now: float) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(self.line(now) + "\n")
        stream.flush()
        self.last_report = now
        self.reported_done = self.done
        self.lines += 1

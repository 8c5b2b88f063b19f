"""How every list/watch loop of the Kubernetes backend waits after a failure, and when it gives up.

As client-go's reflector: every failure (an error, a 410 Gone, a watch ended at once with no event, a body that is
not JSON) waits, the waits doubling to a cap, each jittered by up to as much again, starting over after 2 min without
one (k8s.io/client-go@v0.36.3:tools/cache/reflector.go:62-67, its 0.8 s, 30 s, 2.0, 1.0 and 2 min; :336, the reset;
:1090, a watch under 1 s with no event is a failure). The first wait and the cap are the step's retry policy's.
Unlike a reflector, which never stops, a loop that failed ``attempts`` times in a row gives up with
:class:`ServerKeepsFailing`: one line naming the server and the last reason.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kftrain.errors import KftrainError
from kftrain.retry import RetryPolicy

FACTOR, JITTER, RESET_S = 2.0, 1.0, 120.0  # reflector.go:65-67
SHORT_WATCH_S = 1.0  # reflector.go:1090


class ServerKeepsFailing(KftrainError):
    """A list/watch loop gave up: the API server failed it ``attempts`` times in a row."""


@dataclass
class Backoff:
    """The waits of one loop (``what``, against ``server()``, read when it gives up) between its failures;
    ``attempts`` None: never gives up."""

    server: Callable[[], str]
    what: str
    initial_s: float
    max_s: float
    attempts: int | None
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    sleep: Callable[[float], None] | None = None  # None: a wait on the loop's stop event (tests pass a virtual one)
    _next_s: float = field(init=False, default=0.0)
    _last_wait: float | None = field(init=False, default=None)
    _failures: int = field(init=False, default=0)
    _first_failure: float = field(init=False, default=0.0)

    @classmethod
    def of(cls, policy: RetryPolicy, server: Callable[[], str], what: str, *, gives_up: bool = True) -> Backoff:
        return cls(server, what, policy.initial_s, policy.max_s, max(1, policy.attempts) if gives_up else None)

    def failed(self, reason: str) -> float:
        """The wait before the next try after a failure for ``reason``; :class:`ServerKeepsFailing` when the
        failures in a row reach ``attempts``."""
        now = self.clock()
        if self._failures == 0:
            self._first_failure = now
        self._failures += 1
        if self.attempts is not None and self._failures >= self.attempts:
            reason = " ".join(reason.split())[:300]
            raise ServerKeepsFailing(
                f"the API server at {self.server()} kept failing the {self.what}: {self._failures} tries in a row "
                f"over {now - self._first_failure:.1f}s, the last: {reason}"
            )
        if self._last_wait is None or now - self._last_wait > RESET_S:
            self._next_s = self.initial_s  # reflector: no back-off for 2 min, the waits start over
        self._last_wait = now
        delay = min(self._next_s, self.max_s)
        self._next_s = min(delay * FACTOR, self.max_s)
        return delay + self.rand() * JITTER * delay

    def healthy(self) -> None:
        """The server answered as it should (a watch that delivered events, or lasted): the run of failures ends."""
        self._failures = 0

    def wait(self, seconds: float, stopped: threading.Event) -> None:
        """Wait ``seconds``, cut short by ``stopped``."""
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            stopped.wait(seconds)

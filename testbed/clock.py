"""A clock that moves only when the test moves it, for the Kubernetes backend's wait
(:data:`kftrain.backends.kubernetes.backend.CLOCK`; the ``virtual_clock`` fixture puts one there).

The wait's deadlines (the pending timeout, the suspension limit, the autoscaler's recheck) pass when the scenario
advances the time past them: a test of "fails once the pods stayed unschedulable for the pending timeout" neither
waits for that timeout nor races it against a busy machine's scheduling. Everything else (the cluster's changes,
the watches, the log streams) still happens in real time; a change wakes the wait as it does on a real clock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from kftrain.backends.kubernetes.backend import Clock

# A sleeper looks at the time again this often (real seconds) even when nothing wakes it: only a safety net, as
# advance() wakes every sleeper itself.
_RECHECK_S = 1.0
# How far ticking() moves the time when what it waited for never came: past any deadline of a test, so that the
# code under test stops waiting and the test fails on the error instead of hanging.
_PAST_EVERY_DEADLINE_S = 86400.0


class VirtualClock(Clock):
    """Time that passes only by :meth:`advance`; :meth:`settle` waits until the code under test has acted on it."""

    def __init__(self, start: float = 0.0) -> None:
        self._cond = threading.Condition()
        self._now = start
        self._read: dict[int, float] = {}  # thread -> the time it last read
        self._sleeping: dict[int, tuple[float, threading.Event]] = {}  # thread -> (the time it read, what wakes it)
        # thread -> (the time it read, how many waits in a row it then asked to sleep until that very time): what
        # settle() names when it gives up. On a real clock such a caller looks again a moment later, the time having
        # moved; here the time stays until advance(), and a caller that does not act on its deadline spins.
        self._zero_waits: dict[int, tuple[float, int]] = {}

    def now(self) -> float:
        with self._cond:
            self._read[threading.get_ident()] = self._now
            return self._now

    def wait(self, changed: threading.Event, seconds: float | None) -> None:
        me = threading.get_ident()
        with self._cond:
            read = self._read.get(me, self._now)
            end = None if seconds is None else read + seconds
            if end is not None and self._now >= end:
                if read >= self._now:  # not moved: the deadline it sleeps until is the time it read
                    at, count = self._zero_waits.get(me, (read, 0))
                    self._zero_waits[me] = (read, count + 1 if at == read else 1)
                return  # the time moved past the deadline since the caller read it
            self._zero_waits.pop(me, None)
            self._sleeping[me] = (read, changed)
            self._cond.notify_all()
        try:
            while not changed.wait(_RECHECK_S):
                with self._cond:
                    if end is not None and self._now >= end:
                        return
        finally:
            with self._cond:
                del self._sleeping[me]
                self._cond.notify_all()

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds`` and wake every sleeper: each looks at the new time (a sleeper's event is
        its caller's "something changed": the caller looks again and sleeps on)."""
        with self._cond:
            self._now += seconds
            woken = [event for _, event in self._sleeping.values()]
        for event in woken:
            event.set()

    def settle(self, unless: Callable[[], bool] = lambda: False, timeout: float = 20.0) -> bool:
        """Wait until a caller sleeps again having read the time as it is now: it has acted on the last
        :meth:`advance` and waits on (True); or until ``unless()`` (False: it stopped waiting, say the job it waited
        on is gone). Fails if neither comes within ``timeout`` real seconds."""
        end = time.monotonic() + timeout
        with self._cond:
            while not any(read >= self._now for read, _ in self._sleeping.values()):
                if unless():
                    return False
                spins = [count for at, count in self._zero_waits.values() if at >= self._now]
                assert time.monotonic() < end, f"nothing waits on the clock at {self._now:g} after {timeout}s" + (
                    f" (a caller waited 0 s at this time {max(spins)} times in a row: a deadline it says has come and"
                    " does not act on)"
                    if spins
                    else ""
                )
                self._cond.wait(0.02)  # a sleeper notifies; `unless` is looked at this often
            return True

    def tick_until(self, done: Callable[[], bool], step: float, timeout: float = 20.0) -> None:
        """Move the time on by ``step`` each time a caller waits again having acted on the last move, until
        ``done()`` (say, the job it waited on is gone): a deadline ``n * step`` away passes on the n-th move."""
        end = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < end, f"not done after {timeout}s of ticks (at {self._now:g})"
            if self.settle(unless=done, timeout=max(0.0, end - time.monotonic())):
                self.advance(step)

    @contextlib.contextmanager
    def ticking(self, start: Callable[[], bool], done: Callable[[], bool], step: float) -> Iterator[None]:
        """For the block, in a thread of its own: once ``start()`` holds, :meth:`tick_until` ``done()``. A failure
        there (``start()`` never held, or ticks never got it done) moves the time past every deadline, which ends
        what waits on the clock, and is raised when the block ends."""
        errors: list[AssertionError] = []

        def run() -> None:
            try:
                end = time.monotonic() + 20.0
                while not start():
                    assert time.monotonic() < end, "what the time runs from never came"
                    time.sleep(0.01)
                self.tick_until(done, step)
            except AssertionError as exc:
                errors.append(exc)
                self.advance(_PAST_EVERY_DEADLINE_S)

        thread = threading.Thread(target=run, name="virtual-clock", daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join(30.0)
        if errors:
            raise errors[0]
        assert not thread.is_alive(), "the clock was still ticking"

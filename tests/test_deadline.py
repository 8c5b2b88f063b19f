"""The whole-call deadline every network wait has (issue 52, class 2): a call left behind when it passes, a retry
never waiting past it (a server's ``Retry-After`` included), a signal ending the wait at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kftrain.deadline import Deadline, DeadlinePassed, within
from kftrain.retry import RetryPolicy, call_with_retry
from kftrain.signals import Terminated, terminate_raises


class Throttled(Exception):
    """A 429 as a client raises it: its headers carry the server's Retry-After."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("HTTP 429")
        self.headers = {"Retry-After": retry_after}


def test_within_returns_raises_or_leaves_the_call_behind() -> None:
    assert within(1.0, lambda: 7) == 7
    with pytest.raises(KeyError):
        within(1.0, {}.__getitem__, "x")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(DeadlinePassed, match=r"no whole answer within 0.3s"):
        within(0.3, release.wait, 30)
    assert time.monotonic() - started < 2.0
    release.set()  # the call left behind ends
    with pytest.raises(DeadlinePassed, match="passed before it began"):
        within(0.0, lambda: 7)


def test_a_sigterm_ends_a_call_that_waits_on_a_server() -> None:
    release = threading.Event()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))  # from another thread, as a kubelet's
    started = time.monotonic()
    try:
        with terminate_raises(), pytest.raises(Terminated):
            timer.start()
            within(30.0, release.wait, 30)
    finally:
        timer.cancel()
        release.set()
    assert time.monotonic() - started < 5.0


# Retry-After of the throttled tries; the deadline; what happens: (tries made, whether it gave up on the deadline).
RETRIES = {
    "Retry-After 3600, a minute's deadline": ("3600", 60.0, 1, True),
    "Retry-After 1, a 1.5 s deadline": ("1", 1.5, 2, True),
    "Retry-After 0, no deadline": ("0", None, 3, False),
}


@pytest.mark.parametrize("case", list(RETRIES))
def test_a_retry_never_waits_past_the_deadline(case: str) -> None:
    retry_after, seconds, tries, gave_up = RETRIES[case]
    made: list[float] = []

    def throttled() -> None:
        made.append(time.monotonic())
        raise Throttled(retry_after)

    policy = RetryPolicy(attempts=3, initial_s=0.01, max_s=10.0)
    with pytest.raises(DeadlinePassed if gave_up else Throttled) as caught:
        call_with_retry(
            throttled, policy=policy, is_transient=lambda e: True, what="list", deadline=Deadline.after(seconds)
        )
    assert len(made) == tries, made
    if gave_up:
        assert f"is past the call's {seconds:g}s deadline" in str(caught.value), caught.value
        assert isinstance(caught.value.__cause__, Throttled)

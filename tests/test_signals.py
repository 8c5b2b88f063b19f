"""A stop signal ends the launch step's waits even when it does not wake the waiting thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from kftrain.signals import Terminated, terminate_raises, wait_for


@pytest.fixture
def sigterm_on_another_thread() -> Iterator[Callable[[], None]]:
    """``send()`` makes another thread take a SIGTERM sent to this process: the main thread blocks it at the OS
    level (its Python handler still runs in the main thread, at its next bytecode), so its wait is not interrupted.
    That is what happens when the signal lands just before the main thread blocks, made certain."""
    go = threading.Event()
    taker = threading.Thread(target=lambda: go.wait() and os.kill(os.getpid(), signal.SIGTERM), daemon=True)
    taker.start()  # before the mask: a thread inherits its creator's
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield go.set
    finally:
        taker.join(5)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _seconds_until_terminated(wait: Callable[[threading.Event], object], send: Callable[[], None]) -> float:
    never = threading.Event()
    with terminate_raises(), pytest.raises(Terminated):
        start = time.monotonic()
        threading.Timer(0.1, send).start()
        wait(never)
    return time.monotonic() - start


def test_a_signal_that_does_not_wake_the_main_thread_waits_for_its_plain_event_wait(
    sigterm_on_another_thread: Callable[[], None],
) -> None:
    """The premise: a plain ``Event.wait`` runs its whole timeout with the SIGTERM handler pending."""
    assert _seconds_until_terminated(lambda e: e.wait(2.0), sigterm_on_another_thread) >= 2.0


@pytest.mark.parametrize("seconds", [3600.0, None], ids=["an hour", "no timeout"])
def test_wait_for_handles_the_signal_within_its_latency(
    seconds: float | None, sigterm_on_another_thread: Callable[[], None]
) -> None:
    took = _seconds_until_terminated(lambda e: wait_for(e, seconds), sigterm_on_another_thread)
    assert took < 60  # not the hour: SIGNAL_LATENCY_S, and whatever a loaded machine adds


def test_wait_for_returns_as_event_wait_does() -> None:
    ready = threading.Event()
    assert wait_for(ready, 0.05) is False
    assert wait_for(ready, 0) is False
    ready.set()
    assert wait_for(ready, 3600) is True
    assert wait_for(ready, None) is True

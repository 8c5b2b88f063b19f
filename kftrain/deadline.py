"""A whole-call deadline for every network wait: a call, its retries and its reads end by it, and a SIGTERM at once.

A client's own timeouts are per read (a server trickling a byte every 2 s never trips a 60 s read timeout) and a
retry that honours ``Retry-After: 3600`` waits the hour. :func:`within` runs a call on a thread of its own and
leaves it behind once its :class:`Deadline` passes, waiting in slices so that a signal ends the wait
(:func:`kftrain.signals.wait_for`); :func:`kftrain.retry.call_with_retry` caps its waits by what is left; and
:func:`bound_requests` puts every request of an OpenAPI-generated client (the Kubernetes API, the KFP API) under
one, its reads timing out then too, so that a request left behind ends as well.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kftrain.errors import KftrainError
from kftrain.signals import wait_for

T = TypeVar("T")


class DeadlinePassed(KftrainError, TimeoutError):
    """A call got no whole answer within its deadline (a TimeoutError: a watch backs off from it as from any)."""


@dataclass(frozen=True)
class Deadline:
    """A moment on the monotonic clock (``end``; None: never) and the seconds it was set for (for messages)."""

    end: float | None = None
    seconds: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds, seconds)

    def left(self) -> float | None:
        """Seconds left (0 once passed); None: no deadline."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def sooner(self, other: Deadline | None) -> Deadline:
        """Whichever of the two deadlines comes first."""
        if other is None or other.end is None:
            return self
        return other if self.end is None or other.end < self.end else self

    def __str__(self) -> str:
        return "no deadline" if self.seconds is None else f"{self.seconds:g}s"


def pause(seconds: float) -> None:
    """``time.sleep(seconds)``, but a signal is handled within :data:`~kftrain.signals.SIGNAL_LATENCY_S` even when it
    lands on another thread (see :func:`~kftrain.signals.wait_for`)."""
    wait_for(threading.Event(), seconds)


def within(seconds: float | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, or :class:`DeadlinePassed` once ``seconds`` have passed (None: no limit), the call
    left to end on its daemon thread: nothing in a blocking HTTP client can be interrupted from outside."""
    if seconds is None:
        return fn(*args, **kwargs)
    if seconds <= 0:
        raise DeadlinePassed("its deadline had passed before it began")
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread as it is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="call within a deadline", daemon=True).start()
    if not wait_for(done, seconds):
        raise DeadlinePassed(f"no whole answer within {round(seconds, 1):g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def no_hint_sleeps(pool_manager: Any) -> None:
    """Make ``pool_manager`` (urllib3's) leave a 429's or 503's ``Retry-After`` to the caller's retry loop: urllib3
    itself sleeps it out, an hour included, on a GET or a DELETE (urllib3/urllib3@2.7.0:src/urllib3/util/retry.py,
    ``Retry.is_retry``, ``RETRY_AFTER_STATUS_CODES``)."""
    from urllib3.util.retry import Retry

    retries = pool_manager.connection_pool_kw.get("retries")
    retries = retries if isinstance(retries, Retry) else Retry.from_int(retries)
    pool_manager.connection_pool_kw["retries"] = retries.new(respect_retry_after_header=False)
    pool_manager.clear()  # a pool made before keeps the retries it was made with


def bound_requests(rest: Any, left: Callable[[], float | None], connect_s: float = 10.0) -> Any:
    """``rest`` (an OpenAPI-generated client's REST client) whose every request is answered in whole within ``left()``
    seconds (read as the request begins; None: no limit) or raises :class:`DeadlinePassed` (a stream: its answer
    begun). A request with no timeout of its own gets ``connect_s`` and ``left()`` as its connect and read timeouts.
    Bound again, its requests have the new ``left``."""
    rest._deadline_left = left  # bound again: this ``left`` from now on
    if getattr(rest, "_deadline_bound", False):
        return rest
    no_hint_sleeps(rest.pool_manager)
    plain = rest.request

    def request(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        seconds = rest._deadline_left()
        # A stream (a watch, a followed log) is bounded until its answer begins; it may then stay quiet for long.
        if _request_timeout is None and seconds is not None and kwargs.get("_preload_content", True):
            # A second past the deadline: the deadline, not a read, is what a silent server runs into.
            _request_timeout = (min(connect_s, seconds + 1.0), seconds + 1.0)
        return within(seconds, plain, *args, _request_timeout=_request_timeout, **kwargs)

    rest.request = request
    rest._deadline_bound = True
    return rest

"""One retry mechanism for every remote call: object storage, the Kubernetes API and the KFP API.

A call is retried only when its error says "try again" (throttling, a server error, a dropped connection); each
caller passes its own classifier. A :class:`RetryPolicy` says how long and how often: waits grow exponentially,
capped, optionally jittered (clients in lock-step would hit a recovering server together), honouring
``Retry-After`` within the cap. Under a :class:`~kftrain.deadline.Deadline` no wait outlasts it: a call whose next
try (or the server's ``Retry-After``) would come after it gives up at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from kftrain.deadline import Deadline, DeadlinePassed, pause
from kftrain.errors import redact_urls

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``attempts`` tries, waiting ``initial_s * 2**n`` (capped at ``max_s``) between them."""

    attempts: int = 6
    initial_s: float = 0.5
    max_s: float = 10.0
    # Scale each wait by a random factor in [0.5, 1): spreads out clients that failed together.
    jitter: bool = False

    def lasting(self, seconds: float) -> RetryPolicy:
        """This policy with as many tries as it takes for its waits (without jitter or hints) to add up to at least
        ``seconds``: for a caller that must ride over an outage of about that long, not over a count of failures."""
        attempts, waited = 1, 0.0
        while waited < seconds and self.delay(attempts - 1) > 0:
            waited += min(self.initial_s * 2 ** min(attempts - 1, 64), self.max_s)
            attempts += 1
        return replace(self, attempts=max(self.attempts, attempts))

    def delay(self, retry: int, hint_s: float | None = None) -> float:
        """The wait before retry number ``retry`` (0 for the first), within the cap; a server hint raises it."""
        delay = min(self.initial_s * 2 ** min(retry, 64), self.max_s)  # past 2**64 every wait is the cap
        if self.jitter:
            delay *= 0.5 + random.random() / 2
        if hint_s is not None:
            delay = min(max(delay, hint_s), self.max_s)
        return float(delay)


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def retry_after_s(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` in seconds (on a 429 or 503), when the error carries response headers."""
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def call_with_retry(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    what: str,
    sleep: Callable[[float], None] = pause,
    describe: Callable[[BaseException], str] | None = None,
    deadline: Deadline | None = None,
) -> T:
    """``fn()``, retried while it raises an error ``is_transient`` accepts, up to ``policy.attempts`` tries.

    The last error (or the first one that is not transient) is raised unchanged. Under ``deadline``, a retry that
    would begin after it (the server's ``Retry-After`` included) is not waited for: :class:`DeadlinePassed` says
    why, raised from the last error.
    """
    for retry in range(policy.attempts):
        try:
            return fn()
        except DeadlinePassed:
            raise
        except Exception as exc:
            if retry + 1 >= policy.attempts or not is_transient(exc):
                raise
            hint = retry_after_s(exc)
            delay = policy.delay(retry, hint)
            text = redact_urls(describe(exc) if describe else f"{type(exc).__name__}: {exc}")
            left = deadline.left() if deadline is not None else None
            if left is not None and max(delay, hint or 0.0) >= left:
                asks = f"Retry-After {hint:g}s" if hint is not None and hint >= left else f"a retry in {delay:.1f}s"
                raise DeadlinePassed(
                    f"{text[:200]}; {asks} is past the call's {deadline} deadline ({left:.1f}s left)"
                ) from exc
            log.warning("%s failed (%s); retry %d/%d in %.2fs", what, text[:200], retry + 1, policy.attempts - 1, delay)
            sleep(delay)
    raise AssertionError("unreachable: the last attempt returns or raises")

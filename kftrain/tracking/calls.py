"""Every request to a tracking server, best-effort: a whole-call deadline, one warning line, and the step goes on.

MLflow's own retries are bounded (:data:`kftrain.tracking.env.BOUNDED_HTTP`), but a retry honours a ``Retry-After``
of an hour and its read timeout is per read, so each call also runs under :data:`CALL_DEADLINE_S` on a thread of
its own, left behind when the deadline passes. A server that cannot be reached, answers 5xx or misses a deadline is
taken for down: the calls after it are skipped, said once. A request the server refuses (4xx) loses that request only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from kftrain import deadline
from kftrain.errors import KftrainError
from kftrain.redaction import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

CALL_DEADLINE_S = 8.0  # one call, its retries included: within the 10 s the docs promise for any MLflow wait
MAX_REASON = 300


class TrackingError(KftrainError):
    """A request to the tracking server failed: one line naming it and why (``why``: the reason alone)."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class Timeout(TrackingError):
    """A call got no whole answer within its deadline."""


class Refused(TrackingError):
    """The server answered and refused this one request (a bad name, a value out of range)."""


def describe(exc: BaseException) -> str:
    """The first line of ``exc``, without any secret (:func:`kftrain.redaction.redact`), at most :data:`MAX_REASON`
    characters."""
    text = redact((redact(str(exc)).strip().splitlines() or [type(exc).__name__])[0])
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def _status(code: int, text: str) -> bool:
    """Whether ``text`` names HTTP status ``code`` as a number of its own: never inside a port or another number
    (a server at 127.0.0.1:40153 answering 503 is no 401)."""
    return re.search(rf"(?<![\d.:]){code}(?![\d])", text) is not None


def why_refused(exc: BaseException) -> str:
    """What an MLflow failure means for the user: unreachable, credentials refused, no such run, or else."""
    text = str(exc)
    code = getattr(exc, "error_code", "")
    if _status(401, text) or code == "UNAUTHENTICATED":
        return "refused the credentials (HTTP 401: check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD)"
    if _status(403, text) or code == "PERMISSION_DENIED":
        return "refused access to the run (HTTP 403: the credentials lack permission)"
    if code == "RESOURCE_DOES_NOT_EXIST":
        return "has no such run (MLFLOW_RUN_ID)"
    if isinstance(exc, Timeout):
        return f"did not answer in time ({describe(exc)})"
    if "Connection refused" in text or "Max retries exceeded" in text or "timed out" in text.lower():
        return f"cannot be reached ({describe(exc)})"
    return describe(exc)


def refused(exc: BaseException) -> bool:
    """Whether the server answered and refused this one request (bad input): the next request may well succeed."""
    return getattr(exc, "error_code", "") in ("INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS")


def within(deadline_s: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, or :class:`Timeout` once ``deadline_s`` has passed (:func:`kftrain.deadline.within`:
    the call is left to end on its daemon thread, nothing in MLflow's client can be interrupted from outside)."""
    try:
        return deadline.within(deadline_s, fn, *args, **kwargs)
    except deadline.DeadlinePassed:
        raise Timeout(f"no whole answer within {deadline_s:.0f}s") from None


class Server:
    """The calls to one tracking server (``where``: how messages name it), best-effort as the module says."""

    def __init__(
        self,
        where: str,
        *,
        deadline_s: float = CALL_DEADLINE_S,
        goes_on: str = "the step goes on",
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.where = where
        self.deadline_s = deadline_s
        self.goes_on = goes_on
        self.say = say or log.warning
        self.down = ""  # why the server is taken for down; "" while it answers

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` within the deadline; a failure is a :class:`TrackingError` saying what failed
        (:class:`Refused` for a refused request), and a server that did not answer is marked down (the next calls
        raise at once)."""
        if self.down:
            raise TrackingError(f"MLflow: skipped: {what} ({self.where} is down)")
        try:
            return within(self.deadline_s, fn, *args, **kwargs)
        except Exception as exc:  # MlflowException, a transport error it did not wrap, or Timeout
            why = why_refused(exc)
            if not refused(exc):
                self.down = why
            kind = Refused if refused(exc) else TrackingError
            raise kind(f"MLflow: could not {what} ({self.where}): {why}", why) from None

    def bounded(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, itself a few :meth:`call`, under one deadline for them all (a server answering each
        just in time would hold a step for their sum)."""
        try:
            return within(self.deadline_s, fn, *args)
        except Timeout as exc:
            self.down = why_refused(exc)
            raise TrackingError(f"MLflow: could not {what} ({self.where}): {self.down}", self.down) from None

    def attempt(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """:meth:`call`, a failure a warning (one for the first failure that marks the server down): None."""
        was_down = bool(self.down)
        try:
            return self.call(what, fn, *args, **kwargs)
        except TrackingError as exc:
            if not was_down:
                self.say(f"{redact(str(exc))}; {self.goes_on}")
            return None

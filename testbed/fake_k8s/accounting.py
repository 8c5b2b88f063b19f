"""What the fake API server is asked, and what it answers wrongly on purpose.

:class:`Stats` counts requests by verb (as the API server's metrics name them) and the watches and log streams open
now and at most, for tests and the launcher-cost benchmark (P9, bench/bench_launcher.py); a :class:`Fault` answers
the Nth matching request with an HTTP status, a connection reset or a hold.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from testbed.fake_k8s.api import KIND_NAMES


@dataclass
class Fault:
    """Answer the ``nth`` (1-based) request matching ``method`` and ``path`` (a regex) with ``action``.

    ``action`` is an HTTP status (``"500"``, ``"429"``), ``"html"`` (a proxy's sign-in page), ``"reset"`` (drop
    the connection without answering) or ``"hold"`` (answer only once :attr:`released` is set, as a slow server
    would); ``times`` consecutive matching requests get it; a status is sent with ``Retry-After: retry_after``.
    """

    action: str
    path: str = ""
    method: str | None = None
    nth: int = 1
    times: int = 1
    query: str = ""
    retry_after: str = "0"  # the Retry-After header of a 429 or 5xx answer
    seen: int = 0
    fired: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def hit(self, method: str, path: str, query: str) -> bool:
        if self.method and self.method != method:
            return False
        if not re.search(self.path, path) or (self.query and not re.search(self.query, query)):
            return False
        self.seen += 1
        if self.nth <= self.seen < self.nth + self.times:
            self.fired += 1
            return True
        return False


def verb_of(method: str, path: str, query: Mapping[str, str]) -> str:
    """The request's verb as the API server's metrics name it (get, list, watch, create, patch, delete), with
    pod logs apart: ``log`` for a read of the last lines, ``log-follow`` for a stream; ``discovery`` for the
    API's own description."""
    if path.endswith("/log"):
        return "log-follow" if query.get("follow", "").lower() == "true" else "log"
    if method == "POST":
        return "create"
    if method in ("PATCH", "DELETE", "PUT"):
        return method.lower()
    if query.get("watch", "").lower() in ("true", "1"):
        return "watch"
    if "/namespaces/" not in path and "/clustertrainingruntimes/" not in path:
        return "discovery"
    return "list" if _COLLECTION.search(path) else "get"


# The collections a GET lists: pods, events and every kind's jobs.
_COLLECTION = re.compile(rf"/(pods|events|{'|'.join(map(re.escape, KIND_NAMES))})$")


@dataclass
class Stats:
    """What the server has been asked: requests by verb, each request with when it came, and the watches
    (``watch``) and log streams (``log-follow``) open now and at most. Changed under the server's lock."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    open: collections.Counter[str] = field(default_factory=collections.Counter)
    peak: collections.Counter[str] = field(default_factory=collections.Counter)
    # (time.monotonic(), verb, path) of every request, in the order they came.
    log: list[tuple[float, str, str]] = field(default_factory=list)

    def request(self, verb: str, path: str) -> None:
        self.requests[verb] += 1
        self.log.append((time.monotonic(), verb, path))

    def opened(self, what: str) -> None:
        self.open[what] += 1
        self.peak[what] = max(self.peak[what], self.open[what])

    def closed(self, what: str) -> None:
        self.open[what] -= 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {"requests": dict(self.requests), "open": dict(self.open), "peak": dict(self.peak)}

"""Watches as the fake API server streams them: from a resourceVersion, 410 Gone after a compaction, bookmarks.

A watch sends the changes ``FakeKube.record`` kept after its start (or the current objects as ADDED when it names no
version), filtered by its selectors, until its timeout, the server's stop or a restart; with bookmarks allowed it
gets them when kube-apiserver's watch cache sends them.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from testbed.fake_k8s.api import KIND_NAMES, group_of, status_body
from testbed.fake_k8s.selectors import matches
from testbed.fake_k8s.state import KubeState
from testbed.fake_k8s.transport import Transport


class Watches(Transport):
    """The watch of a job kind's collection or of pods."""

    def _watch(self, version: str, ns: str, plural: str, query: dict[str, str]) -> None:
        kube = self.kube
        selected = self._selected(plural, query)
        if selected is None:
            return
        labels, fields = selected
        timeout = float(query.get("timeoutSeconds") or 1800)
        end = time.monotonic() + timeout
        start_rv = query.get("resourceVersion")
        self._start_chunked("application/json")
        with kube.cond:
            kube.stats.opened("watch")
        try:
            bookmarks = query.get("allowWatchBookmarks", "").lower() == "true"
            self._watch_events(kube, ns, plural, labels, fields, start_rv, end, bookmarks, version)
        finally:
            with kube.cond:
                kube.stats.closed("watch")

    def _watch_events(
        self,
        kube: KubeState,
        ns: str,
        plural: str,
        labels: dict[str, str],
        fields: dict[str, str],
        start_rv: str | None,
        end: float,
        bookmarks: bool = False,
        version: str = "v1",
    ) -> None:
        """Send the watch's events until ``end``. With ``bookmarks``, a BOOKMARK carrying the version of the last
        change of ``plural`` (any object's, selected or not) 2 s before ``end`` and every minute, when it is newer
        than the version the watch started from (k8s.io/apiserver@v0.36.3:pkg/storage/cacher/cache_watcher.go,
        nextBookmarkTime and process: the cacher's bookmark carries its last processed version)."""
        bookmark = _Bookmarks(end) if bookmarks else None
        with kube.cond:
            generation = kube.watch_generation
            if start_rv and start_rv != "0" and int(start_rv) < kube.compacted_rv:
                self._send_event("ERROR", status_body(410, "Expired", f"too old resource version: {start_rv}"))
                self._end_chunked()
                return
            if start_rv in (None, "", "0"):
                # No version: the current state as ADDED events, then what follows.
                if plural == "pods":
                    initial = [o for (n, _), o in kube.pods.items() if n == ns]
                else:
                    initial = [o for (p, n, _), o in kube.jobs.items() if p == plural and n == ns]
                pending = [("ADDED", copy.deepcopy(o)) for o in initial if matches(o, labels, fields)]
                cursor = kube.rv
            else:
                pending, cursor = [], int(start_rv)
            started_at = cursor
        for kind, obj in pending:
            self._send_event(kind, obj)
        while True:
            events: list[tuple[str, dict[str, Any]]] = []
            with kube.cond:
                while not events:
                    if kube.stopping or time.monotonic() >= end:
                        self._end_chunked()
                        return
                    if kube.watch_generation != generation:
                        self._end_chunked()  # the server went away: the client resumes from what it saw
                        return
                    batch = kube.history_after(cursor)
                    if batch:
                        cursor = batch[-1].rv
                        events = [
                            (h.type, h.obj)
                            for h in batch
                            if h.plural == plural and h.namespace == ns and matches(h.obj, labels, fields)
                        ]
                        if not events:
                            continue
                        break
                    if bookmark is not None and bookmark.due(time.monotonic()):
                        newest = kube.last_rv.get(plural, 0)
                        if newest > started_at:
                            events = [("BOOKMARK", _bookmark(plural, version, newest))]
                            break
                    kube.cond.wait(min(0.1, max(0.0, end - time.monotonic())))
            for kind, obj in events:
                self._send_event(kind, obj)

    def _send_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


def _bookmark(plural: str, version: str, rv: int) -> dict[str, Any]:
    """A BOOKMARK's object: the kind watched (pods, or a job at ``version``), and only ``rv`` in its metadata."""
    kind, api_version = ("Pod", "v1") if plural == "pods" else (KIND_NAMES[plural], f"{group_of(plural)}/{version}")
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}}


class _Bookmarks:
    """When a watch ending at ``end`` sends its bookmarks: every minute, and 2 s before its end."""

    EVERY_S = 60.0
    BEFORE_END_S = 2.0

    def __init__(self, end: float) -> None:
        self.end = end
        self.next: float | None = self._after(time.monotonic())

    def _after(self, now: float) -> float | None:
        at = min(now + self.EVERY_S, self.end - self.BEFORE_END_S)
        return at if at > now else None

    def due(self, now: float) -> bool:
        if self.next is None or now < self.next:
            return False
        self.next = self._after(now)
        return True

"""Following one job's custom resource until it ends, and what its conditions mean.

:class:`JobWatch` lists the job once and then watches only it (a field selector on its name) from the
resourceVersion it has seen, so no change between two requests is missed and none is read twice. A
watch whose history was compacted (410 Gone) is answered by a fresh list; a stream that breaks is
retried by :func:`kftrain.retry.call_with_retry` with the API's classifier, each try re-listing first
since events may have been lost, so the list request is made here too rather than by :class:`KubeApi`.
Each watch request lasts at most until the caller's next check, so deadlines and pending pods are
looked at on time.

The operators report a job's state as conditions (Created, Running, Restarting, Suspended, then
Succeeded or Failed): :func:`result_of` maps the final one to a :class:`JobResult`, and
:class:`StatusPrinter` prints each one the job reaches once.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import JobRef, KubeApi, describe, is_transient
from kftrain.job.kinds import GROUP
from kftrain.retry import RetryPolicy, call_with_retry


def conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _true(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions(obj) if c.get("type") == ctype and c.get("status") == "True"), None)


def terminal_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    # Failed wins if both are somehow set: reporting success for a failed job is the worse mistake.
    return _true(obj, "Failed") or _true(obj, "Succeeded")


def is_suspended(obj: dict[str, Any]) -> bool:
    return _true(obj, "Suspended") is not None


def result_of(name: str, obj: dict[str, Any]) -> JobResult | None:
    """The job's result once a condition says it ended (a failure still without its details), else None."""
    cond = terminal_condition(obj)
    if cond is None:
        return None
    if cond["type"] == "Succeeded":
        return JobResult(
            JobPhase.SUCCEEDED,
            reason=cond.get("reason") or "Succeeded",
            message=cond.get("message") or f"{name} succeeded",
        )
    return JobResult(
        JobPhase.FAILED,
        reason=cond.get("reason") or "Failed",
        message=cond.get("message") or f"{name} failed",
        exit_code=1,
    )


class StatusPrinter:
    """Prints each condition the job reaches once: Created, Running, Restarting, Suspended."""

    def __init__(self, console: Console, name: str) -> None:
        self._console = console
        self._name = name
        self._seen: set[tuple[str, str, str]] = set()

    def show(self, obj: dict[str, Any]) -> None:
        for cond in conditions(obj):
            key = (str(cond.get("type")), str(cond.get("status")), str(cond.get("lastTransitionTime")))
            if cond.get("status") != "True" or key in self._seen:
                continue
            self._seen.add(key)
            message = cond.get("message") or ""
            self._console.say(f"{self._name}: {cond.get('type')}{': ' + message if message else ''}")


class JobWatch:
    """The job as it changes: :meth:`list` once, then :meth:`next` for each change worth a look.

    ``window_s`` bounds one watch request; ``retry`` governs broken streams (consecutive failures, the
    waits between them).
    """

    def __init__(self, api: KubeApi, console: Console, job: JobRef, *, retry: RetryPolicy, window_s: int) -> None:
        self._api = api
        self._console = console
        self._job = job
        self._retry = retry
        self._window_s = window_s
        self._obj: dict[str, Any] | None = None
        self._rv: str | None = None
        self._relist = False

    def list(self) -> dict[str, Any] | None:
        """The job as it stands (None if it is gone); the watch continues from here."""
        return self._api.call(f"list {self._job}", self._list)

    def next(self, until: float | None) -> dict[str, Any] | None:
        """The job once an event shows it with conditions or ended, else as it stands at ``until`` (a
        ``time.monotonic()``; None: one whole window); None once it is deleted."""
        return call_with_retry(
            lambda: self._attempt(until),
            policy=self._retry,
            is_transient=is_transient,
            what=f"watch of {self._job}",
            describe=describe,
        )

    def _attempt(self, until: float | None) -> dict[str, Any] | None:
        """One try of :meth:`next`: a list first if the last try broke off, then one watch request."""
        if self._relist:
            # The stream broke off: events may have been lost, so start again from a fresh list. Its request
            # is part of this try (not retried on its own), and the try goes on to watch unless the job is
            # gone or ended: only a watch that ends normally ends the run of failures.
            listed = self._list()
            if listed is None or terminal_condition(listed) is not None:
                return listed
        try:
            return self._window(until)
        except ApiException as exc:
            if exc.status != 410:
                raise  # the request failed, no event was lost: the next try watches on from the same version
            # The history behind our resourceVersion was compacted: start again from a fresh list.
            self._console.say("watch expired (410 Gone); re-listing")
            self._relist = True
            return self._list()
        except Exception:
            self._relist = True
            raise

    def _list(self) -> dict[str, Any] | None:
        job = self._job
        listed: dict[str, Any] = self._api.custom.list_namespaced_custom_object(
            GROUP, job.version, job.namespace, job.plural, field_selector=f"metadata.name={job.name}"
        )
        items = listed.get("items") or []
        self._obj = items[0] if items else None
        self._rv = (listed.get("metadata") or {}).get("resourceVersion")
        self._relist = False
        return self._obj

    def _window(self, until: float | None) -> dict[str, Any] | None:
        """Follow the job's events for one watch request; return as soon as it changes in a way that matters."""
        job = self._job
        remaining = self._window_s if until is None else max(0.0, until - time.monotonic()) + 0.5
        window = max(1, int(min(self._window_s, remaining)))
        w = watch.Watch()
        # timeout_seconds also makes Watch hand us 410 instead of retrying once itself from a stale version.
        stream = w.stream(
            self._api.custom.list_namespaced_custom_object,
            GROUP,
            job.version,
            job.namespace,
            job.plural,
            field_selector=f"metadata.name={job.name}",
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=window,
            _request_timeout=(10, window + 10),
        )
        try:
            for event in stream:
                kind = event.get("type")
                raw = event.get("raw_object") or {}
                self._rv = (raw.get("metadata") or {}).get("resourceVersion") or self._rv
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._obj = None
                    return None
                self._obj = raw
                # Any event that carries a condition is worth a look by the caller; cheap to evaluate.
                if conditions(raw) or terminal_condition(raw) is not None:
                    return raw
                if until is not None and time.monotonic() >= until:
                    return raw
        finally:
            w.stop()
            stream.close()
        return self._obj

"""Following the job and its pods as they change, and what the job's conditions mean.

A :class:`Watcher` keeps one collection (the job alone, or its pods) up to date in a thread of its own: listed once
(for a job just created, the create's answer: :meth:`Watcher.resume`), then watched from the resourceVersion seen,
each watch lasting ``watch_window_s``. As client-go's reflector does, a watch refused a connection, throttled (429) or
cut short resumes from the version it had seen; after a 410 Gone or any other error the next try lists afresh
(k8s.io/client-go@v0.36.3:tools/cache/reflector.go, isWatchErrorRetriable and watchWithResync); every failure waits
its :class:`~.backoff.Backoff`, which ends the step in one line when the server keeps failing. Every change sets the
``changed`` event the backend's wait loop sleeps on. :func:`result_of` maps a job's final condition to its result.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import JobRef, KubeApi, cut, describe, is_transient, read_json
from kftrain.backends.kubernetes.backoff import SHORT_WATCH_S, Backoff
from kftrain.retry import RetryPolicy, exception_chain


def conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def true_condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions(obj) if c.get("type") == ctype and c.get("status") == "True"), None)


def terminal_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    # Failed wins if both are somehow set: reporting success for a failed job is the worse mistake. The
    # training operators say Succeeded; Trainer v2 says Complete on a TrainJob.
    return true_condition(obj, "Failed") or true_condition(obj, "Succeeded") or true_condition(obj, "Complete")


def result_of(name: str, obj: dict[str, Any]) -> JobResult | None:
    """The job's result once a condition says it ended (a failure still without its details), else None."""
    cond = terminal_condition(obj)
    if cond is None:
        return None
    if cond["type"] in ("Succeeded", "Complete"):
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


Items = dict[str, dict[str, Any]]


class ProgressRelay:
    """Hands each new progress report the job object carries (a TrainJob's ``status.trainerStatus``, which Kubeflow
    Trainer's status server applies there: kubeflow/trainer@v2.3.0 ``pkg/statusserver/server.go:166-168``) to the
    progress sinks, once each: a listener of the job's watch, so it costs no request of its own."""

    def __init__(
        self,
        name: str,
        read: Callable[[dict[str, Any]], Mapping[str, Any] | None],
        sinks: Sequence[Callable[[Mapping[str, Any]], None]],
    ) -> None:
        self._name = name
        self._read = read
        self._sinks = list(sinks)
        self._last: Mapping[str, Any] | None = None

    def update(self, items: Items) -> None:
        obj = items.get(self._name)
        status = self._read(obj) if obj is not None else None
        if status is None or status == self._last:
            return
        self._last = status
        for sink in self._sinks:
            with contextlib.suppress(Exception):  # what watches the job must never end it
                sink(status)


class JobWatches:
    """The two watches a job is followed by, each in a thread of its own: the job alone (:attr:`job`) and its
    replica pods (:attr:`pods`). Both set ``changed`` on every change, and when they stop."""

    def __init__(
        self,
        api: KubeApi,
        console: Console,
        job: JobRef,
        *,
        retry: RetryPolicy,
        window_s: int,
        changed: threading.Event,
    ) -> None:
        self.changed = changed
        options: dict[str, Any] = {"retry": retry, "window_s": window_s, "changed": changed}
        self.job = Watcher(api, console, str(job), api.job_collection(job), **options)
        self.pods = Watcher(api, console, f"pods of {job}", api.pod_collection(job), **options)

    def start(self) -> None:
        self.job.start()
        self.pods.start()

    def stop(self) -> None:
        self.job.stop()
        self.pods.stop()

    def begin_round(self) -> None:
        """Before reading what they saw: a change from now on wakes a wait on ``changed``, and the error a watch
        gave up on is raised here."""
        self.changed.clear()
        self.job.raise_error()
        self.pods.raise_error()


class Watcher:
    """One collection, listed then watched in a thread of its own; :meth:`items` is it as last seen, by name.

    ``request`` lists the collection (the client's list call with its selectors bound); with ``watch=True``
    it watches it. ``window_s`` bounds one watch request; ``retry`` sets the :class:`~.backoff.Backoff` between
    failures (``backoff``: that one instead). Each change sets ``changed`` and calls the listeners with the items.
    When the watch gives up, :meth:`raise_error` raises why in the caller's thread.
    """

    def __init__(
        self,
        api: KubeApi,
        console: Console,
        what: str,
        request: Callable[..., Any],
        *,
        retry: RetryPolicy,
        window_s: int,
        changed: threading.Event,
        backoff: Backoff | None = None,
    ) -> None:
        self._api = api
        self._console = console
        self._what = what
        self._request = request
        self._backoff = backoff or Backoff.of(retry, lambda: api.server, f"watch of {what}")
        self._window_s = max(1, int(window_s))
        self._changed = changed
        self._listeners: list[Callable[[Items], None]] = []
        self._lock = threading.Lock()
        self._items: Items = {}
        self._listed = False
        self._rv: str | None = None
        self._relist = False
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch {what}", daemon=True)

    def resume(self, items: Items, resource_version: str) -> None:
        """Instead of the first list (before :meth:`start`): the collection is ``items`` as of
        ``resource_version``, as a create just returned it; the watch starts from there."""
        with self._lock:
            self._items = dict(items)
            self._rv = resource_version
        self._listed = True

    def add_listener(self, listener: Callable[[Items], None]) -> None:
        """Call ``listener(items)`` after every change (in the watcher's thread)."""
        self._listeners.append(listener)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching now: the open stream is cut rather than waited out."""
        self._stopped.set()
        with self._lock:
            response = self._response
        if response is not None:
            cut(response)

    @property
    def listed(self) -> bool:
        """Whether the first list has been read: until then :meth:`items` knows nothing."""
        return self._listed

    def items(self) -> Items:
        with self._lock:
            return dict(self._items)

    def raise_error(self) -> None:
        """Raise the error the watch gave up on, if it did."""
        error = self._error
        if isinstance(error, Exception):
            said = self._api.gave_up(f"watch of {self._what}", error)  # one line, as a call's last try is
            if said is not error:
                raise said from None
        if error is not None:
            raise error

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        self._relist = not self._listed
        try:
            if self._listed:
                self._notify()  # resumed: the listeners see the items it was given
            while not self._stopped.is_set():
                reason = self._attempt()
                if reason is None:
                    self._backoff.healthy()
                elif not self._stopped.is_set():
                    self._backoff.wait(self._backoff.failed(reason), self._stopped)
        except BaseException as exc:
            if not self._stopped.is_set():
                self._error = exc
        finally:
            self._changed.set()

    def _attempt(self) -> str | None:
        """One try: a list first if the last try broke off, then one watch request; why it failed (None: it did
        not). An error that says the request is wrong (403, 404) is raised: no wait mends it."""
        try:
            if self._relist:
                # The stream broke off: events may have been lost, so start again from a fresh list.
                self._list()
            return self._window()
        except ApiException as exc:
            if exc.status == 410:
                # The history behind our resourceVersion was compacted: start again from a fresh list.
                self._console.say(f"watch of {self._what} expired (410 Gone); re-listing")
                self._relist = True
                return "410 Gone: the watch's history was compacted"
            if not is_transient(exc):
                raise
            self._relist = self._relist or not _resumable(exc)
            return describe(exc)
        except Exception as exc:
            if self._stopped.is_set():
                return None  # our own stop() cut the stream
            self._relist = self._relist or not _resumable(exc)
            if isinstance(exc, ValueError):  # a body that is not the API's JSON: an HTML page, say
                return f"not the API's JSON ({describe(exc)})"
            if not is_transient(exc):
                raise
            return describe(_root_cause(exc))

    def _list(self) -> None:
        listed = read_json(self._request)
        items = {item["metadata"]["name"]: item for item in listed.get("items") or []}
        with self._lock:
            self._items = items
            self._rv = (listed.get("metadata") or {}).get("resourceVersion")
        self._relist = False
        self._listed = True
        self._notify()

    def _window(self) -> str | None:
        """Follow the collection's events for one watch request; why it failed when it ended at once with no event
        (as a reflector does, the next try lists afresh), else None."""
        started, events = time.monotonic(), 0
        response = self._request(
            watch=True,
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._window_s,
            _preload_content=False,
            _request_timeout=(10, self._window_s + 10),
        )
        with self._lock:
            self._response = response
        if self._stopped.is_set():
            cut(response)
        try:
            for line in iter_resp_lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    # 410 Gone comes this way when the watch starts from a version already compacted.
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                events += 1
                meta = obj.get("metadata") or {}
                with self._lock:
                    self._rv = meta.get("resourceVersion") or self._rv
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self._items.pop(str(meta.get("name")), None)
                    else:
                        self._items[str(meta.get("name"))] = obj
                self._notify()
        finally:
            with self._lock:
                self._response = None
            with contextlib.suppress(Exception):
                response.release_conn()
        if events or self._stopped.is_set() or time.monotonic() - started >= min(SHORT_WATCH_S, self._window_s / 2):
            return None
        self._relist = True
        return "the watch ended at once with no event"

    def _notify(self) -> None:
        items = self.items()
        for listener in self._listeners:
            listener(items)
        self._changed.set()


# A connection refused, or a stream that ended early (a server shutting down cuts its watches mid-chunk): client-go's
# StreamWatcher ends such a watch as if it had closed normally (io.ErrUnexpectedEOF and net.IsProbableEOF:
# k8s.io/apimachinery@v0.36.3:pkg/watch/streamwatcher.go, receive), and its reflector watches again from the version
# it had seen.
_RESUMABLE = (
    ConnectionRefusedError,
    ConnectionResetError,
    BrokenPipeError,
    http.client.IncompleteRead,
    urllib3.exceptions.ProtocolError,
)


def _root_cause(exc: BaseException) -> BaseException:
    """What ``exc`` comes down to (``Connection refused`` rather than urllib3's wrapping of it), for one line."""
    for _ in range(10):
        inner: BaseException | None = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else None
        inner = inner or exc.__cause__ or next((a for a in exc.args if isinstance(a, BaseException)), None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def _resumable(exc: BaseException) -> bool:
    """Whether a watch that failed with ``exc`` may resume from the version it had seen: the API server refused the
    connection, throttled the request or cut the stream, and every event it did send was read."""
    if isinstance(exc, ApiException):
        return exc.status == 429
    return any(isinstance(e, _RESUMABLE) for e in exception_chain(exc))

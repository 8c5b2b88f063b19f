"""Following one job's custom resource until it ends, and what its conditions mean.

:class:`JobWatch` lists the job once and then keeps one watch of it open (a field selector on its name),
from the resourceVersion it has seen, so no change between two requests is missed and none is read twice.
The watch runs in its own thread and each request lasts a whole window (``watch_window_s``, minutes): the
waiting loop's checks (deadlines, pods stuck Pending) read what the watches delivered and make no request,
so a launcher costs the API server a few requests per job, not one every few seconds. A watch whose history
was compacted (410 Gone) is answered by a fresh list; a stream that breaks is retried by
:func:`kftrain.retry.call_with_retry` with the API's classifier, each try re-listing first since events may
have been lost, so the list request is made here too rather than by :class:`KubeApi`; when the retries are
spent the waiting loop gets the error. :class:`WatchStream` is one watch request that another thread can cut.

The operators report a job's state as conditions (Created, Running, Restarting, Suspended, then
Succeeded or Failed): :func:`result_of` maps the final one to a :class:`JobResult`, and
:class:`StatusPrinter` prints each one the job reaches once.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
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


class WatchStream:
    """One watch request, its events read as they arrive; :meth:`close` from another thread ends it at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: Any = None
        self.closed = False

    def events(
        self, fn: Callable[..., Any], *args: Any, resource_version: str | None, window_s: int, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """The events of ``fn(*args, watch=True, ...)`` (a list call of the client) for one window.

        ``return_type`` in ``kwargs`` names the client model the objects are decoded into (``"V1Pod"``);
        without it an event's object is the JSON dict. An ERROR event (410 Gone...) is raised as ApiException.
        """
        return_type = kwargs.pop("return_type", None)
        response = fn(
            *args,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=window_s,
            _preload_content=False,
            _request_timeout=(10, window_s + 10),
            **kwargs,
        )
        with self._lock:
            self._response = response
            if self.closed:
                cut_response(response)
        decoder = watch.Watch()
        try:
            for line in watch.watch.iter_resp_lines(response):
                event: dict[str, Any] = decoder.unmarshal_event(line, return_type)
                if event.get("type") == "ERROR":
                    status = event.get("raw_object") or {}
                    raise ApiException(status=int(status.get("code") or 500), reason=str(status.get("reason") or ""))
                yield event
        finally:
            with self._lock:
                self._response = None
            with contextlib.suppress(Exception):
                response.release_conn()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._response is not None:
                cut_response(self._response)


def cut_response(response: Any) -> None:
    """Unblock a thread reading a streamed response.

    ``response.close()`` from another thread would wait for the reader's buffer lock (the reader holds it
    while blocked in recv); shutting the socket down makes that recv return instead.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class JobWatch:
    """The job as it changes: :meth:`list` once (or :meth:`resume` from the job as created), :meth:`start` the
    watch, then :meth:`next` for each change worth a look; :meth:`stop` at the end.

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
        self._changes: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._stream = WatchStream()
        self._thread = threading.Thread(target=self._run, name=f"watch-{job.name}", daemon=True)

    def list(self) -> dict[str, Any] | None:
        """The job as it stands (None if it is gone); the watch continues from here."""
        return self._api.call(f"list {self._job}", self._list)

    def resume(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Instead of :meth:`list`: the job as a create (or a read) just returned it; the watch continues from
        its resourceVersion, and nothing is asked of the API server."""
        self._obj = obj
        self._rv = (obj.get("metadata") or {}).get("resourceVersion")
        return obj

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._stream.close()

    def next(self, until: float | None) -> dict[str, Any] | None:
        """The job once an event shows it with conditions or ended, else as it stands at ``until`` (a
        ``time.monotonic()``; None: one whole window); None once it is deleted. Raises what ended the watch."""
        end = time.monotonic() + self._window_s if until is None else until
        current = self._obj
        while True:
            try:
                kind, value = self._changes.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                return current
            if kind == "error":
                raise value
            current = value
            if value is None or conditions(value) or terminal_condition(value) is not None:
                return value

    # -- the watch thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                call_with_retry(
                    self._attempt,
                    policy=self._retry,
                    is_transient=is_transient,
                    what=f"watch of {self._job}",
                    describe=describe,
                    sleep=self._pause,
                )
                if self._obj is None or terminal_condition(self._obj) is not None:
                    return  # gone or ended: nothing more to follow
        except Exception as exc:
            if not self._stop.is_set():
                self._changes.put(("error", exc))

    def _pause(self, seconds: float) -> None:
        """The wait between tries, cut short by :meth:`stop`."""
        self._stop.wait(seconds)

    def _publish(self, obj: dict[str, Any] | None) -> None:
        self._obj = obj
        self._changes.put(("job", obj))

    def _attempt(self) -> None:
        """One try: a list first if the last try broke off, then one watch request for a whole window."""
        if self._stop.is_set():
            return
        if self._relist:
            # The stream broke off: events may have been lost, so start again from a fresh list. Its request
            # is part of this try (not retried on its own), and the try goes on to watch unless the job is
            # gone or ended: only a watch that ends normally ends the run of failures.
            listed = self._list()
            self._publish(listed)
            if listed is None or terminal_condition(listed) is not None:
                return
        try:
            self._window()
        except ApiException as exc:
            if exc.status != 410:
                self._relist = not self._stop.is_set()
                raise  # the request failed: the next try re-lists, then watches on
            # The history behind our resourceVersion was compacted: the next try starts from a fresh list.
            self._console.say("watch expired (410 Gone); re-listing")
            self._relist = True
        except Exception:
            if self._stop.is_set():
                return  # cut by stop()
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

    def _window(self) -> None:
        """Follow the job's events for one watch request, handing every change to :meth:`next`."""
        job = self._job
        for event in self._stream.events(
            self._api.custom.list_namespaced_custom_object,
            GROUP,
            job.version,
            job.namespace,
            job.plural,
            field_selector=f"metadata.name={job.name}",
            resource_version=self._rv,
            window_s=self._window_s,
        ):
            kind = event.get("type")
            raw = event.get("raw_object") or {}
            self._rv = (raw.get("metadata") or {}).get("resourceVersion") or self._rv
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self._publish(None)
                return
            self._publish(raw)
            if terminal_condition(raw) is not None:
                return

"""The job's pods as they change, from one list and one watch kept open, for everything that needs them.

The log streams (:mod:`.logs`) need to know when a replica's container starts or restarts, and the pending
check (:mod:`.pods`) whether a pod is stuck: both read :class:`PodWatch`, which lists the job's pods once
(by the operators' job-name label) and then watches them from that resourceVersion in its own thread, one
request per window, so a launcher never polls for pods. For a job the launcher has just created, the watch
starts from the job's own resourceVersion instead, with no list: every pod of the job comes after it.
A watch that breaks or expires is followed by a fresh
list after a short, growing wait; nothing here fails the job: a pod read late is only a log line or a pending
check late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from kftrain.backends.kubernetes.pods import JOB_NAME_LABEL
from kftrain.backends.kubernetes.watch import WatchStream
from kftrain.retry import RetryPolicy

if TYPE_CHECKING:
    from kubernetes import client

    from kftrain.backends.kubernetes.api import JobRef, KubeApi

log = logging.getLogger(__name__)

PodCallback = Callable[["client.V1Pod"], None]


class PodWatch:
    """The job's pods by uid, kept current by a watch; ``subscribe`` callbacks see every change (in its thread)."""

    def __init__(
        self, api: KubeApi, job: JobRef, *, window_s: int, retry: RetryPolicy, since: str | None = None
    ) -> None:
        """``since``: the resourceVersion of the job as it was created; its pods all come later, so the watch
        starts there and the first list is skipped (it is made after a 410 or a broken watch all the same)."""
        self._api = api
        self._job = job
        self._window_s = window_s
        self._retry = retry
        self._lock = threading.Lock()
        self._pods: dict[str, client.V1Pod] = {}
        self._callbacks: list[PodCallback] = []
        self._rv: str | None = since
        self._stop = threading.Event()
        self._stream = WatchStream()
        self._thread = threading.Thread(target=self._run, name=f"pods-{job.name}", daemon=True)
        self.listed = threading.Event()  # set once the pods as they stand are known (the first list, or `since`)
        if since:
            self.listed.set()

    def subscribe(self, callback: PodCallback) -> None:
        self._callbacks.append(callback)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._stream.close()

    def pods(self) -> list[client.V1Pod]:
        with self._lock:
            return list(self._pods.values())

    def get(self, uid: str) -> client.V1Pod | None:
        with self._lock:
            return self._pods.get(uid)

    # -- the watch thread ------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        relist = self._rv is None
        while not self._stop.is_set():
            try:
                if relist:
                    self._list()
                    relist = False
                self._window()
                failures = 0
            except Exception as exc:
                if self._stop.is_set():
                    return
                relist = True
                gone = isinstance(exc, ApiException) and exc.status == 410
                if not gone:
                    failures += 1
                    log.warning("pods of %s: %s; re-listing", self._job.name, exc)
                self._stop.wait(self._retry.delay(min(failures, 8)) if failures else 0.0)

    def _list(self) -> None:
        job = self._job
        listed = self._api.core.list_namespaced_pod(job.namespace, label_selector=f"{JOB_NAME_LABEL}={job.name}")
        pods = {p.metadata.uid or p.metadata.name: p for p in listed.items or []}
        with self._lock:
            gone = [p for uid, p in self._pods.items() if uid not in pods]
            self._pods = pods
        self._rv = listed.metadata.resource_version if listed.metadata else None
        for pod in [*pods.values(), *gone]:
            self._notify(pod)
        self.listed.set()

    def _window(self) -> None:
        job = self._job
        for event in self._stream.events(
            self._api.core.list_namespaced_pod,
            job.namespace,
            label_selector=f"{JOB_NAME_LABEL}={job.name}",
            resource_version=self._rv,
            window_s=self._window_s,
            return_type="V1Pod",
        ):
            if event.get("type") == "BOOKMARK":
                self._rv = ((event.get("raw_object") or {}).get("metadata") or {}).get("resourceVersion") or self._rv
                continue
            pod = event["object"]
            self._rv = pod.metadata.resource_version or self._rv
            uid = pod.metadata.uid or pod.metadata.name
            with self._lock:
                if event.get("type") == "DELETED":
                    self._pods.pop(uid, None)
                else:
                    self._pods[uid] = pod
            self._notify(pod)

    def _notify(self, pod: client.V1Pod) -> None:
        for callback in self._callbacks:
            try:
                callback(pod)
            except Exception:  # a subscriber's bug must not stop the watch the others rely on
                log.exception("pods of %s: a subscriber failed", self._job.name)

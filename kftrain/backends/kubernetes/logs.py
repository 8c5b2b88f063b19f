"""Every replica's log in the step's own output while the job runs, each line prefixed ``[worker-1]``.

A pipeline step's log is the one place its user looks, so :class:`LogFollower` streams the main container
of every replica pod there, one thread per pod, as the local backend prints its processes. It also keeps
each replica's last lines, which a failed job's message repeats when the pods themselves are gone.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from kftrain.backends.console import Console
from kftrain.backends.kubernetes.pods import replica_label

if TYPE_CHECKING:
    from kubernetes import client

    from kftrain.backends.kubernetes.api import JobRef, KubeApi

_TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


class LogFollower:
    """Streams the log of every replica pod, one thread per pod, each line prefixed ``[worker-1] ``.

    Pods are found by the operator's job-name label (both operators set it) and polled for every
    ``poll_interval_s``, so pods created later (restarts, a launcher created once workers are ready) are
    picked up. A Pending pod is waited on rather than skipped; a container restarted in place is followed
    again. The last ``tail_lines`` lines of each replica are kept.
    """

    def __init__(self, api: KubeApi, console: Console, job: JobRef, *, poll_interval_s: float, tail_lines: int) -> None:
        self._api = api
        self._console = console
        self._job = job
        self._poll_interval_s = poll_interval_s
        self._tail_lines = tail_lines
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._responses: set[Any] = set()
        self._lock = threading.Lock()
        self._tails: dict[str, collections.deque[str]] = {}
        self._failed: list[str] = []
        self._discoverer = threading.Thread(target=self._discover, name=f"logs-{job.name}", daemon=True)
        self._finished = False

    def start(self) -> None:
        self._discoverer.start()

    def tail(self, label: str) -> list[str]:
        """The last lines streamed from replica ``label``."""
        return list(self._tails.get(label, ()))

    def last_failed_tail(self) -> tuple[str | None, list[str]]:
        """The replica whose container was last seen ending non-zero, and its last lines; (None, []) if none."""
        label = self._failed[-1] if self._failed else None
        return label, self.tail(label) if label else []

    def finish(self, grace_s: float) -> None:
        """Let streams of ended pods deliver their last lines, then cut the rest."""
        if self._finished:
            return
        self._finished = True
        end = time.monotonic() + grace_s
        for thread in list(self._threads.values()):
            thread.join(max(0.0, end - time.monotonic()))
        self._stop.set()
        with self._lock:
            responses = list(self._responses)
        for resp in responses:
            _cut(resp)

    def _discover(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self._api.job_pods(self._job)
            except Exception:  # a broken discovery must not end the job; the next poll tries again
                pods = []
            for pod in pods:
                uid = pod.metadata.uid or pod.metadata.name
                if uid not in self._threads and not self._stop.is_set():
                    thread = threading.Thread(
                        target=self._follow_safely, args=(pod,), name=f"log-{pod.metadata.name}", daemon=True
                    )
                    self._threads[uid] = thread
                    thread.start()
            self._stop.wait(self._poll_interval_s)

    def _follow_safely(self, pod: client.V1Pod) -> None:
        with contextlib.suppress(Exception):
            self._follow(pod)

    def _follow(self, pod: client.V1Pod) -> None:
        ns, name = self._job.namespace, pod.metadata.name
        label = replica_label(pod.metadata.labels)
        tail = self._tails.setdefault(label, collections.deque(maxlen=self._tail_lines))
        streamed_instance = -1
        while not self._stop.is_set():
            try:
                current = self._api.read_pod(ns, name)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if current.metadata.uid != pod.metadata.uid:
                return  # recreated under the same name: the discoverer starts a thread for the new one
            phase = current.status.phase if current.status else None
            container, instance, running = _main_container_state(current, self._job.main_container)
            if phase == "Pending" and not running:
                self._stop.wait(self._poll_interval_s)  # not started yet: wait, do not skip
                continue
            if instance == streamed_instance:
                if phase in _TERMINAL_POD_PHASES:
                    return
                self._stop.wait(self._poll_interval_s)  # same run, already streamed: wait for a restart
                continue
            streamed_instance = instance
            for line in self._stream(name, container):
                tail.append(line)
                if not self._stop.is_set():
                    self._console.replica_line(label, line)
            if self._exit_code(name, container) not in (None, 0):
                self._failed.append(label)

    def _stream(self, pod_name: str, container: str | None) -> Iterator[str]:
        resp = self._api.follow_pod_log(self._job.namespace, pod_name, container)
        with self._lock:
            self._responses.add(resp)
        try:
            yield from watch.watch.iter_resp_lines(resp)
        finally:
            with self._lock:
                self._responses.discard(resp)
            with contextlib.suppress(Exception):
                resp.release_conn()

    def _exit_code(self, pod_name: str, container: str | None) -> int | None:
        """Exit code of the container's last run, None while it runs or if the pod is gone."""
        try:
            fresh = self._api.read_pod(self._job.namespace, pod_name)
        except Exception:
            return None
        for cs in (fresh.status.container_statuses if fresh.status else None) or []:
            if cs.name == container and cs.state is not None and cs.state.terminated is not None:
                return int(cs.state.terminated.exit_code)
        return None


def _cut(resp: Any) -> None:
    """Unblock a thread reading a follow stream.

    ``resp.close()`` from another thread would wait for the reader's buffer lock (the reader
    holds it while blocked in recv); shutting the socket down makes that recv return instead.
    """
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _main_container_state(pod: client.V1Pod, preferred: str | None) -> tuple[str | None, int, bool]:
    """(name of the main container, its restart count, whether it has started)."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []]
    name = preferred if preferred in names else (names[0] if names else None)
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        if cs.name == name:
            started = cs.state is not None and (cs.state.running is not None or cs.state.terminated is not None)
            return name, int(cs.restart_count or 0), started
    return name, 0, False

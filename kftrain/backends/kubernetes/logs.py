"""Every replica's log in the step's own output while the job runs, each line prefixed ``[worker-1]``.

A pipeline step's log is the one place its user looks, so :class:`LogFollower` streams the main container
of every replica pod there, one stream (and thread) per container run, as the local backend prints its
processes. It learns of pods, starts and restarts from the job's :class:`~.podwatch.PodWatch`, so it makes
no request but the log streams themselves. It also keeps each replica's last lines, which a failed job's
message repeats when the pods themselves are gone.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes import watch

from kftrain.backends.console import Console
from kftrain.backends.kubernetes.pods import replica_label
from kftrain.backends.kubernetes.watch import cut_response

if TYPE_CHECKING:
    from kubernetes import client

    from kftrain.backends.kubernetes.api import JobRef, KubeApi
    from kftrain.backends.kubernetes.podwatch import PodWatch


@dataclass
class _Replica:
    """One pod's streaming state: the container run last streamed, and the thread streaming now."""

    label: str
    name: str
    streamed: int = -1
    thread: threading.Thread | None = None
    failed_runs: frozenset[int] = frozenset()


class LogFollower:
    """Streams the log of every replica pod the job's :class:`PodWatch` sees, each line prefixed ``[worker-1] ``.

    A pod's main container is streamed once it has started (a Pending pod is waited on, not skipped), and
    again for each restart in place; pods created later (restarts, a launcher created once workers are
    ready) are picked up as the watch reports them. The last ``tail_lines`` lines of each replica are kept.
    """

    def __init__(self, api: KubeApi, console: Console, job: JobRef, pods: PodWatch, *, tail_lines: int) -> None:
        self._api = api
        self._console = console
        self._job = job
        self._pods = pods
        self._tail_lines = tail_lines
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._replicas: dict[str, _Replica] = {}
        self._threads: list[threading.Thread] = []
        self._responses: set[Any] = set()
        self._tails: dict[str, collections.deque[str]] = {}
        self._failed: list[str] = []
        self._finished = False
        pods.subscribe(self._on_pod)

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
        self._pods.listed.wait(grace_s)  # a job that ended at once: its pods' first list starts their streams
        for thread in list(self._threads):
            thread.join(max(0.0, end - time.monotonic()))
        self._stop.set()
        with self._lock:
            responses = list(self._responses)
        for resp in responses:
            cut_response(resp)

    # -- what the pod watch reports --------------------------------------------------------------

    def _on_pod(self, pod: client.V1Pod) -> None:
        uid = pod.metadata.uid or pod.metadata.name
        if self._stop.is_set() or self._pods.get(uid) is None:
            return  # finished, or the pod is gone
        container, run, started = _main_container_state(pod, self._job.main_container)
        with self._lock:
            replica = self._replicas.setdefault(uid, _Replica(replica_label(pod.metadata.labels), pod.metadata.name))
            code = _exit_code(pod, container)
            if code not in (None, 0) and run not in replica.failed_runs:
                replica.failed_runs |= {run}
                self._failed.append(replica.label)
            busy = replica.thread is not None and replica.thread.is_alive()
            if not started or run <= replica.streamed or busy:
                return
            replica.streamed = run
            thread = threading.Thread(
                target=self._follow, args=(uid, replica, container), name=f"log-{pod.metadata.name}", daemon=True
            )
            replica.thread = thread
            self._threads.append(thread)
        thread.start()

    def _follow(self, uid: str, replica: _Replica, container: str | None) -> None:
        tail = self._tails.setdefault(replica.label, collections.deque(maxlen=self._tail_lines))
        with contextlib.suppress(Exception):  # a broken stream must not end the job; its lines are only logs
            for line in self._stream(replica.name, container):
                tail.append(line)
                if not self._stop.is_set():
                    self._console.replica_line(replica.label, line)
        with self._lock:
            replica.thread = None
        # The container may have restarted while its last run was being streamed.
        current = self._pods.get(uid)
        if current is not None:
            self._on_pod(current)

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


def _exit_code(pod: client.V1Pod, container: str | None) -> int | None:
    """Exit code of the container's current run once it has ended, else None."""
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        if cs.name == container and cs.state is not None and cs.state.terminated is not None:
            return int(cs.state.terminated.exit_code)
    return None


def _main_container_state(pod: client.V1Pod, preferred: str | None) -> tuple[str | None, int, bool]:
    """(name of the main container, its restart count, whether it has started)."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []]
    name = preferred if preferred in names else (names[0] if names else None)
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        if cs.name == name:
            started = cs.state is not None and (cs.state.running is not None or cs.state.terminated is not None)
            return name, int(cs.restart_count or 0), started
    return name, 0, False

"""What the backend reads from a job's replica pods: who they are, whether they are stuck, and why the job failed.

* The operators label every replica pod (:data:`JOB_NAME_LABEL`, replica type and index);
  :func:`replica_label` turns those labels into the ``worker-1`` that prefixes the replica's log lines.
* :class:`PendingTracker` notices pods that stay Pending for a reason that will not fix itself (an image
  that cannot be pulled, a pod no node can take): waiting on them would only burn the step's timeout. It
  reads the pods the job's pod watch keeps, not the API.
* :func:`diagnose_failure` says which replica made a failed job fail, with its exit code, its last log
  lines and the recent events of it and the job, so the failed step's message shows the cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobPhase, JobResult

if TYPE_CHECKING:
    from kubernetes import client

    from kftrain.backends.kubernetes.api import JobRef, KubeApi

# training-operator and mpi-operator share these keys.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

# Reasons of pods that will not start without someone fixing something: waiting on them is pointless.
STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
)


def replica_label(labels: Mapping[str, str] | None) -> str:
    """``worker-1`` for a replica pod, from the operator's labels (the prefix of its log lines).

    training-operator sets replica-type (lower case) and replica-index; mpi-operator sets only job-role
    (launcher/worker), plus replica-index on workers. A launcher without an index is ``launcher-0``, as
    the local backend names it.
    """
    labels = labels or {}
    rtype = labels.get(REPLICA_TYPE_LABEL) or labels.get(JOB_ROLE_LABEL) or "pod"
    index = labels.get(REPLICA_INDEX_LABEL) or "0"
    return f"{rtype.lower()}-{index}"


# -- pods stuck Pending ----------------------------------------------------------------------------


class PendingTracker:
    """Fails the job when one of its pods stays Pending for a stuck reason ``limit_s`` seconds (None: never).

    It reads the pods ``pods()`` returns (the job's :class:`~.podwatch.PodWatch`), so a check costs no request.
    A stuck reason comes from the pod's status (a waiting reason such as ImagePullBackOff, PodScheduled False
    for Unschedulable); only a pod Pending ``events_after_s`` without one has its events read, at most once per
    ``events_after_s``: a normal start (ContainerCreating) never costs a request.
    """

    def __init__(
        self,
        api: KubeApi,
        job: JobRef,
        limit_s: float | None,
        pods: Callable[[], list[client.V1Pod]],
        *,
        events_after_s: float = 30.0,
    ) -> None:
        self._api = api
        self._job = job
        self._limit_s = limit_s
        self._pods = pods
        self._events_after_s = events_after_s
        self._since: dict[str, float] = {}
        self._pending_since: dict[str, float] = {}
        self._events_read: dict[str, float] = {}

    def check(self) -> JobResult | None:
        """A failed result once a pod has been stuck too long, else None."""
        now = time.monotonic()
        stuck_now: set[str] = set()
        pending_now: set[str] = set()
        for pod in self._pods():
            if pod.status is None or pod.status.phase != "Pending":
                continue
            uid = pod.metadata.uid or pod.metadata.name
            pending_now.add(uid)
            pending_since = self._pending_since.setdefault(uid, now)
            why = stuck_reason(pod)
            events_due = now - self._events_read.get(uid, -float("inf")) >= self._events_after_s
            if why is None and now - pending_since >= self._events_after_s and events_due:
                self._events_read[uid] = now
                why = self._reason_from_events(pod)
            if why is None:
                continue
            stuck_now.add(uid)
            since = self._since.setdefault(uid, now)
            if self._limit_s is not None and now - since >= self._limit_s:
                reason, detail = why
                label = replica_label(pod.metadata.labels)
                return JobResult(
                    JobPhase.FAILED,
                    reason=reason,
                    message=f"pod {pod.metadata.name} ({label}) stayed Pending for {now - since:.0f}s: "
                    f"{reason}: {detail}; deleted the job",
                    failed_replica=label,
                    exit_code=1,
                )
        self._since = {k: v for k, v in self._since.items() if k in stuck_now}
        self._pending_since = {k: v for k, v in self._pending_since.items() if k in pending_now}
        return None

    def _reason_from_events(self, pod: client.V1Pod) -> tuple[str, str] | None:
        """A stuck reason only the pod's events tell (the scheduler's, or the kubelet's pull errors)."""
        try:
            events = self._api.events_of(self._job.namespace, pod.metadata.name)
        except ApiException:
            return None
        for ev in reversed(events):
            text = f"{ev.reason or ''} {ev.message or ''}"
            if ev.reason == "FailedScheduling":
                return "Unschedulable", ev.message or ""
            for reason in STUCK_WAITING_REASONS:
                if reason in text:
                    return reason, ev.message or ""
        return None


def stuck_reason(pod: client.V1Pod) -> tuple[str, str] | None:
    """(reason, detail) when the pod's status says it will not start by itself, else None."""
    status = pod.status
    for cs in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        waiting = cs.state.waiting if cs.state is not None else None
        if waiting is not None and waiting.reason in STUCK_WAITING_REASONS:
            return waiting.reason, waiting.message or f"container {cs.name}, image {cs.image}"
    for cond in status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            return "Unschedulable", cond.message or ""
    return None


# -- why a job failed ------------------------------------------------------------------------------


@dataclass
class Diagnosis:
    """What the pods say about a failed job; ``replica`` is None when no pod shows a failed container."""

    replica: str | None = None
    exit_code: int = 1
    log_tail: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def diagnose_failure(api: KubeApi, job: JobRef, *, log_lines: int, event_lines: int) -> Diagnosis:
    """The replica whose container failed last, its exit code and last ``log_lines`` lines, and the last
    ``event_lines`` events of that pod and of the job. What cannot be read is left out."""
    try:
        pods = api.job_pods(job)
    except ApiException:
        pods = []
    diagnosis = Diagnosis()
    involved = [job.name]
    failed = failing_pod(pods)
    if failed is not None:
        pod, container, exit_code, previous = failed
        diagnosis.replica = replica_label(pod.metadata.labels)
        diagnosis.exit_code = exit_code or 1
        involved.insert(0, pod.metadata.name)
        try:
            text = api.pod_log(job.namespace, pod.metadata.name, container, tail_lines=log_lines, previous=previous)
            diagnosis.log_tail = text.splitlines()[-log_lines:]
        except ApiException:
            pass
    diagnosis.events = recent_events(api, job.namespace, involved, event_lines)
    return diagnosis


def failing_pod(pods: Iterable[client.V1Pod]) -> tuple[client.V1Pod, str | None, int, bool] | None:
    """The pod whose container ended non-zero most recently: (pod, container, exit code, is it a previous run)."""
    pods = list(pods)
    best: tuple[Any, client.V1Pod, str | None, int, bool] | None = None
    for pod in pods:
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            for state, previous in ((cs.state, False), (cs.last_state, True)):
                term = state.terminated if state is not None else None
                if term is None or not term.exit_code:
                    continue
                when = term.finished_at or pod.metadata.creation_timestamp
                key = when.timestamp() if when is not None else 0.0
                if best is None or key > best[0]:
                    best = (key, pod, cs.name, int(term.exit_code), previous)
    if best is None:
        failed = [p for p in pods if p.status is not None and p.status.phase == "Failed"]
        return (failed[0], None, 1, False) if failed else None
    return best[1], best[2], best[3], best[4]


def recent_events(api: KubeApi, namespace: str, names: Iterable[str], limit: int) -> list[str]:
    """The last ``limit`` events about the objects ``names``, oldest first, one line each."""
    lines: list[tuple[str, str]] = []
    for name in names:
        try:
            events = api.events_of(namespace, name)
        except ApiException:
            continue
        for ev in events:
            when = ev.last_timestamp or ev.event_time or ev.first_timestamp or ev.metadata.creation_timestamp
            stamp = when.isoformat() if when is not None else ""
            obj = ev.involved_object
            lines.append((stamp, f"{ev.type or ''} {ev.reason or ''} {obj.kind}/{obj.name}: {ev.message or ''}"))
    lines.sort(key=lambda x: x[0])
    return [text.strip() for _, text in lines[-limit:]]

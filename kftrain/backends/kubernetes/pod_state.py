"""What the backend reads from a job's replica pods (the API's JSON objects): who they are, the state of their main
container, and why the job failed.

:func:`replica_label` turns the operators' labels (job name, replica type and index) into the ``worker-1`` that
prefixes a replica's log lines; :func:`main_container` says which container runs the replica's program, which run
of it this is (its restart count) and whether it has started; :func:`diagnose_failure` says which replica made a
failed job fail, with its exit code, last log lines and recent events, for the failed step's message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.kubernetes.incarnation import Incarnation, event_time

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef, KubeApi

Pod = dict[str, Any]

# training-operator and mpi-operator share these keys.
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
# A TrainJob's pods: JobSet names the replicated job, and Kubernetes the pod's completion index in its Indexed Job.
JOBSET_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def replica_label(labels: Mapping[str, str] | None) -> str:
    """``worker-1`` for a replica pod, from the operator's labels (the prefix of its log lines).

    training-operator sets replica-type (lower case) and replica-index; mpi-operator sets only job-role
    (launcher/worker), plus replica-index on workers. A launcher without an index is ``launcher-0``, as
    the local backend names it.
    """
    labels = labels or {}
    rtype = labels.get(REPLICA_TYPE_LABEL) or labels.get(JOB_ROLE_LABEL) or labels.get(JOBSET_JOB_LABEL) or "pod"
    index = labels.get(REPLICA_INDEX_LABEL) or labels.get(COMPLETION_INDEX_LABEL) or "0"
    return f"{rtype.lower()}-{index}"


# -- reading a pod ---------------------------------------------------------------------------------


def pod_name(pod: Pod) -> str:
    return str(pod["metadata"]["name"])


def pod_uid(pod: Pod) -> str:
    meta = pod["metadata"]
    return str(meta.get("uid") or meta["name"])


def pod_label(pod: Pod) -> str:
    return replica_label(pod["metadata"].get("labels"))


def pod_phase(pod: Pod) -> str | None:
    return (pod.get("status") or {}).get("phase")


def container_statuses(pod: Pod, *, init: bool = False) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    found = list(status.get("containerStatuses") or [])
    return [*(status.get("initContainerStatuses") or []), *found] if init else found


def pod_condition(pod: Pod, ctype: str) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


@dataclass(frozen=True)
class MainContainer:
    """The replica's program in a pod: its container's name, which run of it this is, and how that run stands."""

    name: str | None
    run: int  # the container's restart count: 0 for its first run
    started: bool  # the current run is running or has ended (it has a log)
    exit_code: int | None  # the current run's exit code once it has ended
    previous_exit_code: int | None  # the exit code of the run before, when it restarted in place

    @property
    def running(self) -> bool:
        return self.started and self.exit_code is None


def main_container(pod: Pod, preferred: str | None) -> MainContainer:
    """The main container of ``pod``: ``preferred`` (the operator's default name) when the pod has it, else the
    first one."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    name = preferred if preferred in names else (names[0] if names else None)
    for cs in container_statuses(pod):
        if cs.get("name") != name:
            continue
        state = cs.get("state") or {}
        ended = state.get("terminated")
        before = (cs.get("lastState") or {}).get("terminated")
        return MainContainer(
            name=name,
            run=int(cs.get("restartCount") or 0),
            started="running" in state or ended is not None,
            exit_code=None if ended is None else int(ended.get("exitCode") or 0),
            previous_exit_code=None if before is None else int(before.get("exitCode") or 0),
        )
    return MainContainer(name=name, run=0, started=False, exit_code=None, previous_exit_code=None)


# -- why a job failed ------------------------------------------------------------------------------


@dataclass
class Diagnosis:
    """What the pods say about a failed job; ``replica`` is None when no pod shows a failed container."""

    replica: str | None = None
    exit_code: int = 1
    log_tail: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def diagnose_failure(
    api: KubeApi, job: JobRef, *, served: Mapping[str, Any] | None, log_lines: int, event_lines: int
) -> Diagnosis:
    """The replica whose container failed last, its exit code and last ``log_lines`` lines, and the last
    ``event_lines`` events of that pod and of the job (``served``: as the API server last served it; its events
    only, not an earlier job's of its name). What cannot be read is left out."""
    try:
        pods = api.job_pods(job)
    except ApiException:
        pods = []
    diagnosis = Diagnosis()
    involved = [job.name]
    failed = failing_pod(pods)
    if failed is not None:
        pod, container, exit_code, previous = failed
        diagnosis.replica = pod_label(pod)
        diagnosis.exit_code = exit_code or 1
        involved.insert(0, pod_name(pod))
        try:
            text = api.pod_log(job.namespace, pod_name(pod), container, tail_lines=log_lines, previous=previous)
            diagnosis.log_tail = text.splitlines()[-log_lines:]
        except ApiException:
            pass
    diagnosis.events = recent_events(api, job.namespace, involved, event_lines, Incarnation.of(served, pods))
    return diagnosis


def failing_pod(pods: Iterable[Pod]) -> tuple[Pod, str | None, int, bool] | None:
    """The pod whose container ended non-zero most recently: (pod, container, exit code, is it a previous run)."""
    pods = list(pods)
    best: tuple[str, Pod, str | None, int, bool] | None = None
    for pod in pods:
        for cs in container_statuses(pod):
            for state, previous in ((cs.get("state"), False), (cs.get("lastState"), True)):
                term = (state or {}).get("terminated")
                if term is None or not term.get("exitCode"):
                    continue
                # RFC 3339 UTC timestamps sort as strings.
                key = str(term.get("finishedAt") or pod["metadata"].get("creationTimestamp") or "")
                if best is None or key > best[0]:
                    best = (key, pod, cs.get("name"), int(term["exitCode"]), previous)
    if best is None:
        failed = [p for p in pods if pod_phase(p) == "Failed"]
        return (failed[0], None, 1, False) if failed else None
    return best[1], best[2], best[3], best[4]


def recent_events(
    api: KubeApi, namespace: str, names: Iterable[str], limit: int, incarnation: Incarnation
) -> list[str]:
    """The last ``limit`` events about the objects ``names`` in their ``incarnation``, oldest first, one line
    each."""
    lines: list[tuple[str, str]] = []
    for name in names:
        try:
            events = api.events_of(namespace, name)
        except ApiException:
            continue
        for ev in events:
            if not incarnation.owns(ev):
                continue
            when = event_time(ev)
            stamp = when.isoformat() if when is not None else ""
            obj = ev.involved_object
            lines.append((stamp, f"{ev.type or ''} {ev.reason or ''} {obj.kind}/{obj.name}: {ev.message or ''}"))
    lines.sort(key=lambda x: x[0])
    return [text.strip() for _, text in lines[-limit:]]


class FailureMemory:
    """The replica container last seen ending non-zero, with its exit code, kept after its pod is gone: with
    ``backoffLimit: 0`` training-operator deletes the failed pod as it fails the job (seen against
    kubeflow/training-operator@v1.9.0 in tests/controlplane/test_operators.py), so the pods listed once the job
    has failed no longer show the code. A listener of the pod watch (:meth:`update`)."""

    def __init__(self) -> None:
        self._last: tuple[str, str, int] | None = None  # (finishedAt, replica label, exit code)

    def update(self, pods: Mapping[str, Pod]) -> None:
        found = failing_pod(pods.values())
        if found is None or found[1] is None:  # a Failed phase with no container that ended: nothing to keep
            return
        pod, container, exit_code, previous = found
        status = next(cs for cs in container_statuses(pod) if cs.get("name") == container)
        term = (status.get("lastState" if previous else "state") or {}).get("terminated") or {}
        seen = (str(term.get("finishedAt") or ""), pod_label(pod), exit_code)
        if self._last is None or seen[0] >= self._last[0]:
            self._last = seen

    def last(self) -> tuple[str, int] | None:
        """(replica label, exit code) of the last container seen failing; None if none was."""
        return None if self._last is None else (self._last[1], self._last[2])

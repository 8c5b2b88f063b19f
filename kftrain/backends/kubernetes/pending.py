"""Why a job is not running yet, and whether to wait for it: queues, gangs and scale-ups wait, broken pods fail.

A Pending pod (:func:`classify`) **fails now** when a container waits on ImagePullBackOff, ErrImagePull,
InvalidImageName, ErrImageNeverPull or CreateContainerConfigError (none fixes itself: the step fails with the
kubelet's message, and for a container the operator added, where its image comes from); **waits**, within the step's
timeout, while its Volcano gang gathers or the cluster autoscaler's latest event is ``TriggeredScaleUp``; and is
**bounded** by ``pending_timeout_s`` when left unscheduled otherwise. A pod creating its containers is none of these;
a job its queue holds suspended (Kueue) has no pods yet (:func:`suspension`). :class:`PendingTracker` applies this to
the pods as they change, and says what the job waits for, once per change.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.incarnation import Incarnation, event_time
from kftrain.backends.kubernetes.pod_state import (
    Pod,
    container_statuses,
    pod_condition,
    pod_label,
    pod_name,
    pod_phase,
    pod_uid,
)
from kftrain.backends.kubernetes.watch import true_condition
from kftrain.job.kinds import kind_for
from kftrain.job.pod_apply import QUEUE_NAME_LABEL

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef, KubeApi

# Waiting reasons of containers that will not start without someone fixing something.
IMAGE_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
FAIL_NOW_REASONS = IMAGE_REASONS | {"CreateContainerConfigError"}
# Volcano's PodGroupNotReady: how its scheduler's message on a gang member it cannot place yet begins.
VOLCANO_GANG_NOT_READY = "pod group is not ready"
# Volcano's reason for a member it could place once the whole gang can be (kube-scheduler never writes it).
VOLCANO_SCHEDULABLE = "Schedulable"
# The cluster autoscaler's events on a pending pod: a node group is growing for it, or none would fit it.
SCALE_UP_TRIGGERED = "TriggeredScaleUp"
SCALE_UP_DECLINED = "NotTriggerScaleUp"


class Verdict(enum.Enum):
    FAIL = "fail now"
    WAIT = "wait"  # up to the step's overall timeout
    BOUNDED = "wait up to pending_timeout_s"


@dataclass(frozen=True)
class PodWait:
    """Why one pod is not running yet: the verdict, a short reason and the cluster's own words."""

    verdict: Verdict
    reason: str
    detail: str
    container: str | None = None  # the container that cannot start, where one is to blame


def classify(pod: Pod, scale_up: tuple[str, str] | None = None) -> PodWait | None:
    """What ``pod`` waits for, or None when it is not Pending or is merely starting.

    ``scale_up`` is the (reason, message) of the latest cluster-autoscaler event about the pod, if any.
    """
    if pod_phase(pod) != "Pending":
        return None
    for cs in container_statuses(pod, init=True):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FAIL_NOW_REASONS:
            where = f"container {cs.get('name')}, image {cs.get('image')}"
            message = waiting.get("message")
            detail = f"{where}: {message}" if message else where
            return PodWait(Verdict.FAIL, waiting["reason"], detail, container=cs.get("name"))
    scheduled = pod_condition(pod, "PodScheduled")
    if (pod.get("spec") or {}).get("nodeName") or (scheduled or {}).get("status") == "True":
        return None  # on a node: starting (pulling, creating containers)
    if scheduled is None:
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        return PodWait(Verdict.BOUNDED, "NotScheduled", f"no scheduler has placed it yet (schedulerName {scheduler})")
    reason, message = str(scheduled.get("reason") or "Unschedulable"), str(scheduled.get("message") or "")
    if message.startswith(VOLCANO_GANG_NOT_READY) or reason == VOLCANO_SCHEDULABLE:
        return PodWait(Verdict.WAIT, "GangScheduling", message)
    if scale_up is not None and scale_up[0] == SCALE_UP_TRIGGERED:
        return PodWait(Verdict.WAIT, SCALE_UP_TRIGGERED, scale_up[1])
    return PodWait(Verdict.BOUNDED, reason, message)


def suspension(obj: dict[str, Any]) -> str | None:
    """What a suspended job waits for, in words; None when it is not suspended."""
    spec = obj.get("spec") or {}
    # The training operators' jobs are suspended in runPolicy; a Trainer v2 TrainJob in its spec.
    field = "spec.suspend" if "runPolicy" not in spec and "suspend" in spec else "spec.runPolicy.suspend"
    suspended_by_spec = (spec.get("runPolicy") or {}).get("suspend") is True or spec.get("suspend") is True
    if not suspended_by_spec and true_condition(obj, "Suspended") is None:
        return None
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)
    if queue:
        return f"suspended until Kueue admits it from LocalQueue {queue!r} (no pods until then)"
    return f"suspended ({field}) until something resumes it"


class SuspensionTracker:
    """Says in the step's log when the job is suspended, by what, and when it resumes; a job suspended
    ``limit_s`` seconds on end is given up on (None: never, only the step's overall timeout bounds it)."""

    def __init__(self, console: Console, name: str, limit_s: float | None) -> None:
        self._console = console
        self._name = name
        self._limit_s = limit_s
        self._since: float | None = None
        self._shown: str | None = None

    @property
    def next_check(self) -> float | None:
        """When the suspension becomes too long; None when the job is not suspended or may stay so."""
        if self._since is None or self._limit_s is None:
            return None
        return self._since + self._limit_s

    @property
    def gave_up(self) -> str:
        return f"job stayed suspended for {self._limit_s:g}s ({self._shown})"

    def describe(self) -> str:
        """What the job waits for while suspended; empty when it is not."""
        return self._shown or ""

    def update(self, obj: dict[str, Any], now: float) -> bool:
        """Note the job as it is now; True once it has been suspended too long."""
        why = suspension(obj)
        if why != self._shown:
            if why is not None:
                self._console.say(f"{self._name}: waiting: {why}")
            elif self._shown is not None:
                self._console.say(f"{self._name}: resumed: no longer suspended")
            self._shown = why
        self._since = None if why is None else (self._since if self._since is not None else now)
        next_check = self.next_check
        return next_check is not None and now >= next_check


_WAIT_WORDS = {
    "GangScheduling": "waiting for their Volcano gang to be complete",
    SCALE_UP_TRIGGERED: "waiting for the cluster autoscaler to add a node",
}


def next_look(since: float, last_read: float | None, every_s: float) -> float:
    """When events are next worth reading about something seen waiting from ``since``: ``every_s`` after it began
    (an operator or a scheduler acts a moment later), then ``every_s`` after the last read."""
    first = since + every_s
    return first if last_read is None else max(first, last_read + every_s)


class PendingTracker:
    """Applies :func:`classify` to the job's pods: fails the job at once, or once a bounded wait lasts
    ``limit_s`` seconds (None: never), and reports each kind of wait in the step's log when it begins.

    The autoscaler's events are not part of the pod, so no watch of the pod shows them: they are read every
    ``recheck_s`` seconds while a pod is unscheduled, from ``recheck_s`` after it was first seen so (a pod
    waits a moment for the scheduler whenever it is created: no event is asked for then), and again before a
    bounded wait is declared too long, together with the job's pods as the API server has them then.
    """

    def __init__(self, api: KubeApi, console: Console, job: JobRef, limit_s: float | None, *, recheck_s: float):
        self._api = api
        self._console = console
        self._job = job
        self._operator_containers = kind_for(job.kind, job.api_version).spec.operator_containers
        self._limit_s = limit_s
        self._recheck_s = recheck_s
        self._since: dict[str, float] = {}  # pod uid -> when its bounded wait began
        self._unscheduled_since: dict[str, float] = {}  # pod uid -> since when no node takes it (yet)
        self._scale_ups: dict[str, tuple[str, str]] = {}  # pod name -> latest autoscaler (reason, message)
        self._events_read_at: float | None = None
        self._said: dict[tuple[Verdict, str], str] = {}  # each kind of wait going on, as the log said it
        self._next_check: float | None = None

    @property
    def next_check(self) -> float | None:
        """When (``time.monotonic()``) to call :meth:`update` again even if no pod changes; None: no need."""
        return self._next_check

    def describe(self) -> str:
        """What the job's pods wait for now, as the log said it; empty when nothing."""
        return "; ".join(self._said.values())

    def update(self, pods: Iterable[Pod], now: float) -> JobResult | None:
        """A failed result when a pod cannot start or has waited too long, else None (the wait goes on)."""
        pending = [p for p in pods if pod_phase(p) == "Pending"]
        # Pods no node will take (yet): the ones a scale-up could be for.
        unscheduled = [p for p in pending if (w := classify(p)) is not None and w.verdict == Verdict.BOUNDED]
        self._unscheduled_since = {
            uid: self._unscheduled_since.get(uid, now) for uid in (pod_uid(p) for p in unscheduled)
        }
        read_now = self._events_due(now)
        if read_now:
            self._read_scale_ups(now, pending)
        waits = self._classify(pending, now)
        if any(self._overdue(pod, wait, now) for pod, wait in waits):
            # About to give up on the job and delete it: first the pods as the API server has them now, not as the
            # watch last delivered them (a watch lags its server, most when the server is busiest; the scheduler's
            # verdict on a pod just created may still be on its way), and the autoscaler may have started a scale-up
            # since the last look.
            pending = self._pending_now(pending)
            if not read_now:
                self._read_scale_ups(now, pending)
            waits = self._classify(pending, now)
        self._report(waits)
        for pod, wait in waits:
            if wait.verdict == Verdict.FAIL:
                return self._failed(pod, wait, f"cannot start: {wait.reason}: {wait.detail}{self._whose(wait)}")
            if self._overdue(pod, wait, now):
                waited = now - self._since[pod_uid(pod)]
                return self._failed(
                    pod,
                    wait,
                    f"stayed Pending for {waited:.0f}s (pending_timeout_seconds {self._limit_s:g}): "
                    f"{wait.reason}: {wait.detail}",
                )
        self._schedule(waits)
        return None

    def _classify(self, pending: list[Pod], now: float) -> list[tuple[Pod, PodWait]]:
        """Each pending pod that waits for something, with what; the clocks of bounded waits start or stop."""
        found = []
        for pod in pending:
            wait = classify(pod, self._scale_ups.get(pod_name(pod)))
            if wait is not None:
                found.append((pod, wait))
        bounded = {pod_uid(p) for p, w in found if w.verdict == Verdict.BOUNDED}
        self._since = {uid: self._since.get(uid, now) for uid in bounded}
        return found

    def _overdue(self, pod: Pod, wait: PodWait, now: float) -> bool:
        due = self._due(pod, wait)
        return due is not None and now >= due

    def _due(self, pod: Pod, wait: PodWait) -> float | None:
        """When ``pod``'s bounded wait becomes too long; None when it is not bounded (or nothing bounds it).

        The one sum both :meth:`_overdue` and :attr:`next_check` use: in floating point ``now - since >= limit`` is
        not ``now >= since + limit`` (0.7 - 0.2 == 0.49999999999999994 < 0.5, while 0.2 + 0.5 == 0.7). A next check
        that :meth:`update` does not act on has the backend's wait loop sleep 0 s and look again until its clock
        moves past it: a moment later on time.monotonic(), never on a clock that moves only when told (a test's,
        testbed/clock.py, on which the step went on looking at 0.7 until the test gave up)."""
        if wait.verdict != Verdict.BOUNDED or self._limit_s is None:
            return None
        return self._since[pod_uid(pod)] + self._limit_s

    def _pending_now(self, seen: list[Pod]) -> list[Pod]:
        """The job's pending pods as the API server lists them now (one request); ``seen`` when it cannot say."""
        try:
            return [p for p in self._api.job_pods(self._job) if pod_phase(p) == "Pending"]
        except ApiException:
            return seen

    def _events_next(self) -> float | None:
        """When the autoscaler's events are next worth reading; None while every pod has a node."""
        if not self._unscheduled_since:
            return None
        return next_look(min(self._unscheduled_since.values()), self._events_read_at, self._recheck_s)

    def _events_due(self, now: float) -> bool:
        due = self._events_next()
        return due is not None and now >= due

    def _read_scale_ups(self, now: float, pending: list[Pod]) -> None:
        """The latest cluster-autoscaler event about each pod of the namespace (two requests, whatever the pods);
        about a ``pending`` pod's name, only one about that pod, not an earlier one of its name (a retried task's
        job makes its pods under the same names: :mod:`.incarnation`)."""
        incarnation = Incarnation.of(None, pending)
        latest: dict[str, tuple[str, str, str]] = {}
        for reason in (SCALE_UP_TRIGGERED, SCALE_UP_DECLINED):
            try:
                events = self._api.pod_events_with_reason(self._job.namespace, reason)
            except ApiException:
                continue  # unreadable: the pods stay as they are classified without it
            for ev in events:
                if not incarnation.owns(ev):
                    continue
                when = event_time(ev)
                stamp = when.isoformat() if when is not None else ""
                name = ev.involved_object.name
                if name not in latest or stamp >= latest[name][0]:
                    latest[name] = (stamp, reason, ev.message or "")
        self._scale_ups = {name: (reason, message) for name, (_, reason, message) in latest.items()}
        self._events_read_at = now

    def _report(self, waits: list[tuple[Pod, PodWait]]) -> None:
        """Say what the pods wait for when a kind of wait begins (not at every change of its details)."""
        groups: dict[tuple[Verdict, str], list[tuple[Pod, PodWait]]] = {}
        for pod, wait in waits:
            if wait.verdict != Verdict.FAIL and wait.reason != "NotScheduled":  # not scheduled *yet* is normal
                groups.setdefault((wait.verdict, wait.reason), []).append((pod, wait))
        said = {}
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            if key in self._said:
                said[key] = self._said[key]
                continue
            labels = ", ".join(sorted(pod_label(p) for p, _ in members))
            verdict, reason = key
            what = _WAIT_WORDS[reason] if verdict == Verdict.WAIT else reason
            said[key] = f"{labels}: {what}: {members[0][1].detail}"
            if verdict == Verdict.WAIT:
                self._console.say(f"{said[key]} (the step waits up to its timeout)")
            else:
                bound = f"{self._limit_s:g}s" if self._limit_s is not None else "no limit"
                self._console.say(f"{said[key]} (the step fails if this lasts {bound})")
        self._said = said

    def _schedule(self, waits: list[tuple[Pod, PodWait]]) -> None:
        times = [due for pod, wait in waits if (due := self._due(pod, wait)) is not None]
        events_next = self._events_next()
        if events_next is not None:
            times.append(events_next)
        self._next_check = min(times) if times else None

    def _whose(self, wait: PodWait) -> str:
        """Where the operator takes the image of a container it added, when that image is what cannot start: the
        job's manifest cannot change it."""
        added = self._operator_containers.get(wait.container or "")
        if added is None or wait.reason not in IMAGE_REASONS:
            return ""
        return f"; container {wait.container}: {added.image}"

    def _failed(self, pod: Pod, wait: PodWait, what: str) -> JobResult:
        label = pod_label(pod)
        return JobResult(
            JobPhase.FAILED,
            reason=wait.reason,
            message=f"pod {pod_name(pod)} ({label}) {what}",
            failed_replica=label,
            exit_code=1,
        )

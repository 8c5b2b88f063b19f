"""Pods the API server refuses to create for a job: the step fails at once when they are refused for good.

The operators create the pods, so a refused create shows only as the Warning event each kind names
(:attr:`~kftrain.job.kinds.base.KindSpec.create_failed_reasons`: kubeflow/training-operator@v1.9.0:
pkg/controller.v1/control/pod_control.go ``FailedCreatePod``; kubernetes@v1.36.3:pkg/controller/job/job_controller.go
``FailedCreate``), on the job or on an object named ``<job>-...``. Pod Security Admission's refusal
(kubernetes@v1.36.3:staging/src/k8s.io/pod-security-admission/admission/admission.go, "violates PodSecurity") and
an invalid pod (apimachinery@v0.36.3:pkg/api/errors/errors.go, NewInvalid) do not fix themselves: a job with fewer
pods than replicas (a TrainJob: none) has its events read, and fails with the API server's words and, for a container
the operator added (:attr:`~kftrain.job.kinds.base.KindSpec.operator_containers`), how to give it a securityContext.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.kubernetes.incarnation import Incarnation
from kftrain.backends.kubernetes.pending import next_look
from kftrain.job.kinds import kind_for

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef, KubeApi

POD_SECURITY = "violates PodSecurity"
# A create refused by validation: `Pod "<name>" is invalid[: <errors>]` (the operators' events quote the error
# after "Error creating: ").
INVALID_POD = re.compile(r'\bPod "[^"]+" is invalid\b')
# How the message names each container that fails a check (pod-security-admission/policy/check_*.go:
# `container "x" must ...`, `containers "x", "y" must ...`, `pod or container "x" must ...`).
_NAMED_CONTAINERS = re.compile(r'containers? ((?:"[^"]+"(?:, )?)+)')


def is_the_jobs(involved_name: str, job_name: str) -> bool:
    return involved_name == job_name or involved_name.startswith(job_name + "-")


def refused_containers(message: str) -> list[str]:
    """The containers a Pod Security refusal's ``message`` names, in its order, each once."""
    names = (n for group in _NAMED_CONTAINERS.findall(message) for n in re.findall(r'"([^"]+)"', group))
    return list(dict.fromkeys(names))


# The longest wait between two reads of the create failures of a job still lacking pods.
LONGEST_RECHECK_S = 30.0


class RefusedPods:
    """While the job runs with fewer pods than it asks for, reads the operators' create failures: ``recheck_s``
    seconds after it was first seen so (an operator creates pods a moment after the job), then at twice the last
    wait, up to :data:`LONGEST_RECHECK_S`. An operator refused creates every pod it tries at once, so the first
    read sees a refusal; a busy operator is slow to create them, and each read lists a namespace's events."""

    def __init__(self, api: KubeApi, job: JobRef, *, recheck_s: float) -> None:
        self._api = api
        self._job = job
        # Only the reasons the job's kind's controllers record: one request each, at every look.
        self._kind = kind_for(job.kind, job.api_version)
        self._reasons = self._kind.spec.create_failed_reasons
        self._recheck_s = recheck_s
        self._every_s = recheck_s  # the wait before the next read
        self._missing_since: float | None = None
        self._read_at: float | None = None

    @property
    def next_check(self) -> float | None:
        if self._missing_since is None:
            return None
        return next_look(self._missing_since, self._read_at, self._every_s)

    def missing_pods(self, job: Mapping[str, Any], pods: int) -> bool:
        """Whether the job ``job``, with ``pods`` pods, has fewer than its replicas (none, when it cannot say)."""
        expected = self._kind.expected_pods(job)
        return pods < (1 if expected is None else expected)

    def update(self, job: Mapping[str, Any] | None, pods: Mapping[str, Any], now: float) -> JobResult | None:
        """A failed result once admission has refused a pod of the job for good; None while the wait goes on.
        ``job``: the job as served while it runs (None: suspended, or not seen yet), ``pods`` its pods by name;
        the events are read only while it lacks pods (:meth:`missing_pods`), and only this job's count
        (:class:`~kftrain.backends.kubernetes.incarnation.Incarnation`: not an earlier job's of its name)."""
        if job is None or not self.missing_pods(job, len(pods)):
            self._missing_since = self._read_at = None
            self._every_s = self._recheck_s
            return None
        if self._missing_since is None:
            self._missing_since = now
        due = self.next_check
        if due is None or now < due:
            return None
        self._read_at = now
        self._every_s = min(2 * self._every_s, max(LONGEST_RECHECK_S, self._recheck_s))
        found = self._refusal(Incarnation.of(job, pods.values()))
        if found is None:
            return None
        reason, refusal = found
        if reason == "Invalid":
            message = (
                f"the API server refused the job's pods as invalid: {refusal}; fix the job's pod template (the "
                "launch step's inputs, or the manifest's replica specs)"
            )
        else:
            message = self._explained(refusal)
        return JobResult(JobPhase.FAILED, reason=reason, message=message, exit_code=1)

    def _explained(self, refusal: str) -> str:
        added = self._kind.spec.operator_containers
        theirs = [f"container {n}: {added[n].security_context}" for n in refused_containers(refusal) if n in added]
        return (
            f"the API server refused the job's pods: {refusal}; namespace {self._job.namespace} enforces Pod "
            "Security Admission (its pod-security.kubernetes.io/enforce label): give the containers a "
            "securityContext that meets that level (the launch step's security_context input, or the job's "
            "manifest), or run in a namespace that allows them" + "".join(f"; {t}" for t in theirs)
        )

    def _refusal(self, incarnation: Incarnation) -> tuple[str, str] | None:
        """("PodSecurity" or "Invalid", the event's message) of the first refusal of this job's pods for good."""
        for reason in self._reasons:
            try:
                events = self._api.warnings_with_reason(self._job.namespace, reason)
            except ApiException:
                continue  # unreadable (no grant on events): the pending timeout still bounds the wait
            for event in events:
                message = event.message or ""
                if not is_the_jobs(event.involved_object.name or "", self._job.name) or not incarnation.owns(event):
                    continue
                if POD_SECURITY in message:
                    return "PodSecurity", message
                if INVALID_POD.search(message):
                    return "Invalid", message
        return None

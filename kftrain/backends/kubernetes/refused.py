"""Pods the API server refuses to create for a job: the step fails at once when admission forbids them for good.

The operators create a job's pods (the training-operator and mpi-operator its pods, JobSet and the Job controller a
TrainJob's and an MPIJob launcher's), so a refused create is seen only as the Warning event they record, never as a
pod: the training-operator's ``FailedCreatePod`` on the job (kubeflow/training-operator@v1.9.0:
pkg/controller.v1/control/pod_control.go, "Error creating: %v"), the Job controller's ``FailedCreate`` on a child Job
(kubernetes@v1.36.3:pkg/controller/job/job_controller.go, FailedCreatePodReason), mpi-operator's ``MPIJobFailed``
on an MPIJob; each kind names its own (:attr:`~kftrain.job.kinds.base.KindSpec.create_failed_reasons`). Child Jobs
are named from the job (``<job>-launcher``, ``<jobset>-<replicatedJob>-<index>``), so an event about the job or an
object named ``<job>-...`` is the job's.

Pod Security Admission's refusal does not fix itself (someone must change the pods or the namespace's
``pod-security.kubernetes.io/enforce`` label), so a job none of whose pods exists yet fails as soon as one is seen,
rather than waiting out its pending timeout; its message is the API server's, naming the level and each check
failed (kubernetes@v1.36.3:staging/src/k8s.io/pod-security-admission/admission/admission.go, "violates PodSecurity").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.kubernetes.pending import next_look
from kftrain.job.kinds import kind_for

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef, KubeApi

POD_SECURITY = "violates PodSecurity"


def is_the_jobs(involved_name: str, job_name: str) -> bool:
    return involved_name == job_name or involved_name.startswith(job_name + "-")


class RefusedPods:
    """While the job runs and has no pod, reads the operators' create failures every ``recheck_s`` seconds (from
    ``recheck_s`` after it was first seen so: an operator creates pods a moment after the job)."""

    def __init__(self, api: KubeApi, job: JobRef, *, recheck_s: float) -> None:
        self._api = api
        self._job = job
        # Only the reasons the job's kind's controllers record: one request each, at every look.
        self._reasons = kind_for(job.kind, job.api_version).spec.create_failed_reasons
        self._recheck_s = recheck_s
        self._no_pods_since: float | None = None
        self._read_at: float | None = None

    @property
    def next_check(self) -> float | None:
        if self._no_pods_since is None:
            return None
        return next_look(self._no_pods_since, self._read_at, self._recheck_s)

    def update(self, waits_for_pods: bool, now: float) -> JobResult | None:
        """A failed result once admission has refused a pod of the job for good; None while the wait goes on.
        ``waits_for_pods``: the job runs (not suspended) and has no pod yet; the events are read only then."""
        if not waits_for_pods:
            self._no_pods_since = self._read_at = None
            return None
        if self._no_pods_since is None:
            self._no_pods_since = now
        due = self.next_check
        if due is None or now < due:
            return None
        self._read_at = now
        refusal = self._pod_security_refusal()
        if refusal is None:
            return None
        return JobResult(
            JobPhase.FAILED,
            reason="PodSecurity",
            message=(
                f"the API server refused the job's pods: {refusal}; namespace {self._job.namespace} enforces Pod "
                "Security Admission (its pod-security.kubernetes.io/enforce label): give the containers a "
                "securityContext that meets that level (the job's manifest), or run in a namespace that allows them"
            ),
            exit_code=1,
        )

    def _pod_security_refusal(self) -> str | None:
        for reason in self._reasons:
            try:
                events = self._api.warnings_with_reason(self._job.namespace, reason)
            except ApiException:
                continue  # unreadable (no grant on events): the pending timeout still bounds the wait
            for event in events:
                message = event.message or ""
                if POD_SECURITY in message and is_the_jobs(event.involved_object.name or "", self._job.name):
                    return message
        return None

"""Who restarts a failed replica and how its failures count against a backoff limit (:class:`Backoff`), what the
owner of a failed batch Job does next (:class:`AfterJobFailure`), and which exit codes the ExitCode policy retries."""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.job.model import RestartPolicy

# What a batch Job's backoffLimit is when its spec leaves it unset (kubernetes@v1.36.3:pkg/apis/batch/v1/defaults.go,
# SetDefaults_Job; backoffLimitPerIndex makes it MaxInt32 there).
JOB_DEFAULT_BACKOFF_LIMIT = 6


@dataclass(frozen=True)
class Backoff:
    """Who restarts a replica that fails, and how its failures count against a backoff limit.

    training-operator restarts its own jobs' replicas and counts the restarts of all a job's pods together against
    ``runPolicy.backoffLimit`` (``job`` None; ``limit`` None: no limit). A replica whose pod a batch Job makes
    (mpi-operator's launcher, each replicated Job of a TrainJob's JobSet) is restarted by the Job controller, which
    counts that Job's pods alone (``job``: its name) against the Job's ``backoffLimit``, and replaces a failed pod
    under restartPolicy Never with a new one; training-operator does not."""

    limit: int | None
    job: str | None = None

    @staticmethod
    def in_place(policy: RestartPolicy) -> bool:
        """Whether the kubelet restarts a failed replica's container in its pod (else a new pod, or none, runs it)."""
        return policy in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS)

    def retries(self, policy: RestartPolicy, code: int) -> bool:
        """Whether a replica under ``policy`` that exited with ``code`` (not 0) is run again, limit aside."""
        if self.in_place(policy):
            return True
        if policy == RestartPolicy.EXIT_CODE:
            return is_retryable_exit_code(code)
        return self.job is not None

    def spent(self, policy: RestartPolicy, restarts: int) -> bool:
        """Whether a failure, after ``restarts`` restarts counted with it, fails the job instead of being retried.

        In place (OnFailure, Always): the kubelet restarts the container, and the controller fails the job once the
        restartCounts of its pods add up to the limit (a limit of 0: once there is one), whether that last restart
        would have run to its end or not (kubeflow/training-operator@v1.9.0:pkg/core/job.go, PastBackoffLimit;
        kubernetes@v1.36.3:pkg/controller/job/job_controller.go, pastBackoffLimitOnFailure): the restart that reaches
        the limit is not made here. In a new pod (Never in a batch Job): the job fails once more pods have failed
        than the limit (job_controller.go, ``exceedsBackoffLimit := jobCtx.failed > *job.Spec.BackoffLimit``).
        training-operator's ExitCode reaches no limit but 0 (:meth:`counts`)."""
        if self.limit is None:
            return False
        if not self.counts(policy):
            return self.limit == 0
        if self.in_place(policy):
            return restarts + 1 >= self.limit
        return restarts >= self.limit

    def counts(self, policy: RestartPolicy) -> bool:
        """Whether the restarts under ``policy`` count against the limit. training-operator's do not under ExitCode:
        it counts a replaced pod by its work queue's requeues of the job, ``previousRetry+1 > backoffLimit``
        (kubeflow/training-operator@v1.9.0:pkg/controller.v1/common/job.go, ReconcileJobs), and every controller of
        it is given a ``util.FakeWorkQueue``, whose ``NumRequeues`` is always 0 (pkg/controller.v1/pytorch/
        pytorchjob_controller.go, NewReconciler; pkg/common/util/fake_workqueue.go); its other count, PastBackoffLimit
        (pkg/core/job.go), adds up restartCounts, which stay 0 in the pods ExitCode makes ``restartPolicy: Never``
        (pkg/core/pod.go, SetRestartPolicy). So a limit of 0 fails the job at its first failure, and
        any other lets a replica killed by a signal be replaced without end: only activeDeadlineSeconds ends that
        (tests/controlplane/test_restarts.py holds this against the operator)."""
        return not (policy == RestartPolicy.EXIT_CODE and self.job is None)

    def counted(self) -> str:
        """Where the count is kept, for messages: the job's, or the batch Job's."""
        return f"Job {self.job}" if self.job else "the job"


@dataclass(frozen=True)
class AfterJobFailure:
    """What the owner of a batch Job that failed (a TrainJob's JobSet) does next: ``restart`` the whole job, every
    replica in new Jobs (``counted`` towards its limit of such restarts, or not), or fail it with ``reason``; ``why``
    says what decided, for messages."""

    restart: bool
    counted: bool
    reason: str
    why: str


def is_retryable_exit_code(code: int) -> bool:
    """The ExitCode restart policy: 128-255 (killed by a signal: 137 is an OOM kill or a preemption) are
    retried, 1-127 (the program's own failure) are not. A negative code is Python's "killed by signal N"."""
    return code >= 128 or code < 0

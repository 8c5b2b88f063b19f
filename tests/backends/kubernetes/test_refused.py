"""Pods the API server refuses to create (kftrain/backends/kubernetes/refused.py): a job none of whose pods exists
fails at once when an operator's create-failure event says Pod Security Admission forbade them, whichever operator
recorded it and on which of the job's objects; any other refusal, or one about another job, is waited on.

The real operators' events, in a namespace enforcing ``restricted``: tests/controlplane/test_launch_life.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kftrain.backends.base import JobPhase
from kftrain.job.model import TrainingJob
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import make_backend, mpi_job, pytorch_job, running, succeed

PSA = (
    'Error creating: pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
    '!= false (container "pytorch" must set securityContext.allowPrivilegeEscalation=false)'
)
QUOTA = (
    'Error creating: pods "{pod}" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=8, limited: cpu=8'
)


@dataclass(frozen=True)
class Refusal:
    id: str
    kind: str  # of the object the event is about
    name: Callable[[str], str]  # its name, from the job's
    reason: str
    message: str
    fails: bool
    job: Callable[[], TrainingJob] = pytorch_job  # the job the step waits on


REFUSALS = [
    # kubeflow/training-operator@v1.9.0:pkg/controller.v1/control/pod_control.go
    Refusal("training-operator", "PyTorchJob", lambda job: job, "FailedCreatePod", PSA, True),
    # kubeflow/mpi-operator@v0.8.2:pkg/controller/mpi_job_controller.go
    Refusal(
        "mpi-operator", "MPIJob", lambda job: job, "MPIJobFailed", "worker pod created failed: " + PSA, True, mpi_job
    ),
    # kubernetes@v1.36.3:pkg/controller/job/job_controller.go, on a child Job (an MPIJob's launcher, a TrainJob's)
    Refusal("job-controller", "Job", lambda job: f"{job}-launcher", "FailedCreate", PSA, True, mpi_job),
    Refusal("quota", "PyTorchJob", lambda job: job, "FailedCreatePod", QUOTA, False),  # may clear: waited on
    Refusal("another-job", "PyTorchJob", lambda job: f"other{job}", "FailedCreatePod", PSA, False),
    # A reason the kind's controllers never record is not read: training-operator has no launcher Job.
    Refusal("not-the-kinds-reason", "Job", lambda job: f"{job}-launcher", "FailedCreate", PSA, False),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.id)
def test_a_pod_security_refusal_fails_the_job_at_once_and_nothing_else_does(
    refusal: Refusal, kube: FakeKube, operator: OperatorSim
) -> None:
    def scenario(sim: JobSim) -> None:
        sim.condition("Created")
        pod = f"{sim.name}-master-0"
        sim.kube.add_event(
            sim.namespace, refusal.kind, refusal.name(sim.name), refusal.reason, refusal.message.format(pod=pod)
        )
        sim.sleep(0.5)  # several of the step's looks at the events, with no pod
        running(sim)
        succeed(sim)

    operator.scenario = scenario
    backend, out = make_backend(kube, poll_interval_s=0.05, pending_timeout_s=None)
    result = backend.run(refusal.job(), timeout=20)
    if refusal.fails:
        assert result.phase == JobPhase.FAILED and result.reason == "PodSecurity", result.describe()
        assert 'violates PodSecurity "restricted:latest"' in result.message
        assert "namespace default enforces Pod Security Admission" in result.message
        assert kube.jobs_of("pytorchjobs") == kube.jobs_of("mpijobs") == []  # deleted by the step
    else:
        assert result.succeeded, (result.describe(), out.getvalue())

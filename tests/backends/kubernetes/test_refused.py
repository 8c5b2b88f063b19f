"""Pods the API server refuses to create (kftrain/backends/kubernetes/refused.py): a job lacking pods fails at once
when an operator's create-failure event says Pod Security Admission forbade them or the API server found them
invalid, whichever operator recorded it and on which of the job's objects; any other refusal (a quota may clear),
or one about another job or an earlier job of the same name, is waited on.

The real operators' events, in a namespace enforcing ``restricted``: tests/controlplane/test_launch_pod_security.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kftrain.backends.base import JobPhase
from kftrain.backends.kubernetes.api import JobRef
from kftrain.backends.kubernetes.refused import RefusedPods
from kftrain.job.model import TrainingJob
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import make_backend, mpi_job, pytorch_job, running, succeed

PSA = (
    'Error creating: pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
    '!= false (container "pytorch" must set securityContext.allowPrivilegeEscalation=false)'
)
INVALID = 'Error creating: Pod "{pod}" is invalid: spec.dnsPolicy: Unsupported value: "Bogus"'
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
    # A pod the API server finds invalid: its template is the job's, so it never will be valid.
    Refusal("invalid", "PyTorchJob", lambda job: job, "FailedCreatePod", INVALID, True),
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
    if refusal.fails and refusal.message == INVALID:
        assert result.phase == JobPhase.FAILED and result.reason == "Invalid", result.describe()
        assert "refused the job's pods as invalid" in result.message and "spec.dnsPolicy" in result.message
        assert kube.jobs_of("pytorchjobs") == []  # deleted by the step
    elif refusal.fails:
        assert result.phase == JobPhase.FAILED and result.reason == "PodSecurity", result.describe()
        assert 'violates PodSecurity "restricted:latest"' in result.message
        assert "namespace default enforces Pod Security Admission" in result.message
        assert kube.jobs_of("pytorchjobs") == kube.jobs_of("mpijobs") == []  # deleted by the step
    else:
        assert result.succeeded, (result.describe(), out.getvalue())


INIT_PYTORCH = (
    'Error creating: pods "{pod}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
    '!= false (container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false), unrestricted '
    'capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"])'
)


def test_a_job_whose_master_runs_while_its_workers_are_refused_fails_at_once_naming_the_operators_container(
    kube: FakeKube, operator: OperatorSim
) -> None:
    """What the real training-operator does in a ``restricted`` namespace when only its ``init-pytorch`` breaks
    the level (tests/controlplane/test_launch_pod_security.py): the Master is created and runs, every Worker's create is
    refused, and the job never gets a status. The step reads the events while the job has fewer pods than
    replicas, and says how a cluster gives the operator's container a securityContext."""

    def scenario(sim: JobSim) -> None:
        sim.condition("Created")
        sim.scale_up("Master")
        sim.start()
        pod = f"{sim.name}-worker-0"
        sim.kube.add_event(sim.namespace, "PyTorchJob", sim.name, "FailedCreatePod", INIT_PYTORCH.format(pod=pod))
        sim.sleep(5.0)  # far past the step's looks: it must have ended the job by then

    operator.scenario = scenario
    backend, out = make_backend(kube, poll_interval_s=0.05, pending_timeout_s=None)
    result = backend.run(pytorch_job(workers=1), timeout=20)
    assert result.phase == JobPhase.FAILED and result.reason == "PodSecurity", (result.describe(), out.getvalue())
    assert "container init-pytorch: training-operator adds it" in result.message, result.message
    assert "--pytorch-init-container-template-file" in result.message, result.message
    assert kube.jobs_of("pytorchjobs") == []  # deleted by the step


def test_once_every_replica_has_its_pod_the_events_are_not_read(kube: FakeKube, operator: OperatorSim) -> None:
    """A refusal recorded once every pod exists (one about a Worker refused before the namespace's label was
    relaxed) does not end the job: the events are read only while pods are missing."""

    def scenario(sim: JobSim) -> None:
        running(sim)
        sim.kube.add_event(
            sim.namespace, "PyTorchJob", sim.name, "FailedCreatePod", PSA.format(pod=f"{sim.name}-worker-0")
        )
        sim.sleep(0.5)  # several of the step's poll intervals with every pod there
        succeed(sim)

    operator.scenario = scenario
    backend, out = make_backend(kube, poll_interval_s=0.05, pending_timeout_s=None)
    result = backend.run(pytorch_job(workers=1), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())


@pytest.mark.parametrize(
    ("kind", "name", "earlier", "job"),
    [
        # about the job itself: an earlier job of its name had another uid
        ("PyTorchJob", lambda job: job, {"uid": "uid-of-an-earlier-job"}, pytorch_job),
        # about a child the step never sees (an MPIJob's launcher Job): recorded before this job was created
        ("Job", lambda job: f"{job}-launcher", {"stamp": "2026-01-01T00:00:00Z"}, mpi_job),
    ],
    ids=["the-jobs-own-uid", "a-childs-time"],
)
def test_an_earlier_job_of_the_same_names_refusal_is_not_this_ones(
    kind: str,
    name: Callable[[str], str],
    earlier: dict[str, str],
    job: Callable[[], TrainingJob],
    kube: FakeKube,
    operator: OperatorSim,
) -> None:
    """A retried task creates its job under the same name (from its run and task), while the events of the one
    deleted before it stay in the namespace for an hour: only this job's count
    (kftrain/backends/kubernetes/incarnation.py), so the step waits on it, and its failure shows its own events."""

    def scenario(sim: JobSim) -> None:
        sim.condition("Created")
        reason = "FailedCreatePod" if kind == "PyTorchJob" else "FailedCreate"
        message = PSA.format(pod=f"{sim.name}-master-0")
        sim.kube.add_event(sim.namespace, kind, name(sim.name), reason, message, **earlier)
        sim.sleep(0.5)  # several of the step's looks at the events, with no pod
        running(sim)
        succeed(sim)

    operator.scenario = scenario
    backend, out = make_backend(kube, poll_interval_s=0.05, pending_timeout_s=None)
    result = backend.run(job(), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())


class _Reads:
    """A KubeApi's event reads, counted by when they were asked (no event found)."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.now = 0.0

    def warnings_with_reason(self, namespace: str, reason: str) -> list[Any]:
        self.at.append(self.now)
        return []


def test_while_pods_are_missing_the_events_are_read_ever_less_often_and_again_soon_once_one_goes_missing() -> None:
    """Each read lists a namespace's events: 2 s after the job first lacks pods, then at twice the last wait up to
    30 s. A job whose pods are all there reads nothing; when one goes missing again the schedule starts over."""
    api = _Reads()
    refused = RefusedPods(api, JobRef.make("PyTorchJob", "kubeflow.org/v1", "j", "ns"), recheck_s=2.0)  # type: ignore[arg-type]
    job = {"kind": "PyTorchJob", "metadata": {"name": "j", "uid": "u"}, "spec": {"pytorchReplicaSpecs": {"Master": {}}}}

    def follow(until: float, pods: dict[str, Any]) -> None:
        while api.now <= until:
            assert refused.update(job, pods, api.now) is None
            api.now = round(api.now + 0.5, 1)

    follow(100.0, {})
    assert api.at == [2.0, 6.0, 14.0, 30.0, 60.0, 90.0]
    follow(200.0, {"j-master-0": {"metadata": {"name": "j-master-0"}}})
    assert api.at[-1] == 90.0 and refused.next_check is None
    follow(210.0, {})
    assert api.at[6:] == [202.5, 206.5]

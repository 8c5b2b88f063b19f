"""How kftrain's Kubernetes backend reports what the real operators made of a job (training-operator v1.9.0,
mpi-operator v0.8.2, JobSet v0.12.0 and Trainer v2.3.0 on the real control plane, a node agent deciding how each pod
ends): the job's phase, the failing replica's exit code and log, and a pod no node fits reported unschedulable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from kftrain.backends.base import JobPhase
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.job.kinds import KINDS, KindOptions
from kftrain.job.kinds.mpijob.options import MPIJobOptions
from kftrain.job.kinds.pytorchjob.options import PyTorchJobOptions
from kftrain.job.kinds.tfjob.options import TFJobOptions
from kftrain.job.kinds.trainjob.options import TrainJobOptions
from kftrain.job.request import JobRequest
from kftrain.retry import RetryPolicy
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import api_fixture, node_fixture, operated_cluster_fixture  # noqa: F401
from testbed.controlplane.node_agent import SUCCEED, NodeAgent, Outcome, Plans, fail, unschedulable

pytestmark = suite.MARKS

NAMESPACE = "kftrain-endings"
IMAGE = "example.com/train:1"
COMMAND = ["python", "train.py"]
WAIT_S = 90.0
# What the node does with each pod of a job, by the job's name and the pod's replica label (master-0); a pod of a job
# without a plan runs until the module ends.
PLANS = Plans()


@dataclass(frozen=True)
class Ending:
    """A job whose pods end as ``outcomes`` (by replica label; the others run on), and what the backend must say."""

    id: str
    kind: str
    options: Callable[[], KindOptions]
    outcomes: dict[str, Outcome]
    phase: JobPhase
    says: tuple[str, ...] = ()  # in the result's message or its log tail
    exit_code: int = 0
    restart_policy: str = "Never"
    # The launch input's default; 0 for an MPIJob, whose launcher Job would make a new pod after 10 s, 20 s, 40 s.
    backoff_limit: int = 3


TRACEBACK = ("Traceback (most recent call last):", "ValueError: the loss is NaN")
MASTER_FAILS = Ending(
    "pytorchjob-master-fails",
    "PyTorchJob",
    lambda: PyTorchJobOptions(workers=1),
    {"master-0": fail(3, *TRACEBACK)},
    JobPhase.FAILED,
    says=TRACEBACK,
    exit_code=3,
)
ENDINGS = [
    # training-operator: the Master's success is the PyTorchJob's (success policy), a Worker still running or not.
    Ending(
        "pytorchjob-succeeds",
        "PyTorchJob",
        lambda: PyTorchJobOptions(workers=1),
        {"master-0": SUCCEED},
        JobPhase.SUCCEEDED,
    ),
    MASTER_FAILS,
    # With backoffLimit 0 training-operator deletes the failed pod as it fails the job: the exit code is the one the
    # backend's pod watch saw.
    replace(MASTER_FAILS, id="pytorchjob-master-fails-no-retries", says=(), backoff_limit=0),
    # JobSet completes when its Jobs do, and Trainer the TrainJob when its JobSet does.
    Ending(
        "trainjob-succeeds",
        "TrainJob",
        lambda: TrainJobOptions(num_nodes=2),
        {"node-0": SUCCEED, "node-1": SUCCEED},
        JobPhase.SUCCEEDED,
    ),
    # mpi-operator: the launcher's Job decides, the workers only host ranks.
    Ending(
        "mpijob-launcher-fails",
        "MPIJob",
        lambda: MPIJobOptions(workers=1),
        {"launcher-0": fail(5, "mpirun: boom")},
        JobPhase.FAILED,
        says=("mpirun: boom",),
        exit_code=5,
        backoff_limit=0,
    ),
]


@pytest.mark.parametrize("ending", ENDINGS, ids=lambda e: e.id)
def test_the_backend_reports_how_the_operator_ended_the_job(
    ending: Ending, cluster: ControlPlane, node: NodeAgent, api: Any
) -> None:
    request = JobRequest(
        ending.kind,
        image=IMAGE,
        command=COMMAND,
        options=ending.options(),
        restart_policy=ending.restart_policy,
        backoff_limit=ending.backoff_limit,
    )
    job = request.to_job(ending.id, runtimes=KINDS.get(ending.kind).runtimes_from_env())
    PLANS[ending.id] = ending.outcomes
    config = KubernetesConfig(namespace=NAMESPACE, log_drain_s=0.5, retry=RetryPolicy(attempts=2, initial_s=0.1))
    result = KubernetesBackend(config, api_client=api).run(job, timeout=WAIT_S)
    said = "\n".join([result.message, *result.log_tail])
    assert result.phase == ending.phase, f"{said}\nnode errors: {node.errors[-3:]}"
    assert all(line in said for line in ending.says), said
    if ending.exit_code:
        assert result.exit_code == ending.exit_code, said


def test_a_pod_no_node_fits_is_reported_unschedulable(cluster: ControlPlane, node: NodeAgent, api: Any) -> None:
    """The scheduler's PodScheduled=False condition, as the node agent writes it, is what the backend's pending
    diagnosis reads: past the pending timeout the job fails naming the scheduler's message."""
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    request = JobRequest("TFJob", image=IMAGE, command=COMMAND, options=TFJobOptions(workers=1))
    job = request.to_job("tf-unschedulable")
    PLANS[job.name] = {"worker-0": unschedulable(message)}
    config = KubernetesConfig(namespace=NAMESPACE, pending_timeout_s=3.0, retry=RetryPolicy(attempts=2, initial_s=0.1))
    result = KubernetesBackend(config, api_client=api).run(job, timeout=WAIT_S)
    assert result.phase == JobPhase.FAILED
    assert message in result.message, result.message

"""How many pods each kind's operator keeps for a running job, counted from the job as the API server serves it
(kftrain.job.kinds.base.Kind.expected_pods): one per replica, a replica spec with no ``replicas`` counted as the
operator's defaulting sets it. The launch step reads the operators' create failures only while a job has fewer
(kftrain/backends/kubernetes/refused.py). Against the real operators: tests/controlplane/test_operators.py."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.job.kinds import KINDS


def served(kind: str, api_version: str, key: str, replicas: dict[str, int | None]) -> dict[str, Any]:
    specs = {rtype: ({} if n is None else {"replicas": n}) for rtype, n in replicas.items()}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "j"}, "spec": {key: specs}}


@pytest.mark.parametrize(
    ("kind", "api_version", "key", "replicas", "expected"),
    [
        ("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", {"Chief": None, "PS": 2, "Worker": 3}, 6),
        ("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", {"Master": None, "Worker": 2}, 3),
        ("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", {"Master": 1, "Worker": None}, 2),
        # mpi-operator@v0.8.2:pkg/apis/kubeflow/v2beta1/default.go: a Launcher 1, a Worker 0
        ("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", {"Launcher": None, "Worker": None}, 1),
        ("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", {"Launcher": None, "Worker": 4}, 5),
        # training-operator@v1.9.0:pkg/apis/kubeflow.org/v1/mpi_defaults.go: the same
        ("MPIJob", "kubeflow.org/v1", "mpiReplicaSpecs", {"Launcher": None, "Worker": None}, 1),
        ("MPIJob", "kubeflow.org/v1", "mpiReplicaSpecs", {"Launcher": 1, "Worker": 2}, 3),
    ],
)
def test_the_pods_a_running_job_has_are_one_per_replica(
    kind: str, api_version: str, key: str, replicas: dict[str, int | None], expected: int
) -> None:
    assert KINDS.get(kind, api_version).expected_pods(served(kind, api_version, key, replicas)) == expected


def test_a_trainjob_and_a_job_without_replica_specs_do_not_say() -> None:
    trainjob = KINDS.get("TrainJob")
    assert trainjob.expected_pods({"spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {}}}) is None
    assert KINDS.get("PyTorchJob").expected_pods({"spec": {}}) is None

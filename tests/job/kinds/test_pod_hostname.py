"""Each replica's pod host name, as its operator and Kubernetes name it (what a clean-env local replica gets as
HOSTNAME). tests/controlplane/test_operators.py checks the same against the real operators' pods."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.job import kind_of, load_manifest
from kftrain.job.topology import ReplicaId
from testbed.manifests import mpijob_v1, mpijob_v2, pytorchjob, tfjob, trainjob

CASES: list[tuple[str, dict[str, Any], ReplicaId, str]] = [
    # training-operator v1.9.0: the pod's name, <job>-<type>-<index>, and no hostname
    ("tfjob-worker", tfjob({"Worker": 2}, name="tf"), ReplicaId("Worker", 1), "tf-worker-1"),
    ("pytorchjob-master", pytorchjob({"Master": 1, "Worker": 1}, name="pt"), ReplicaId("Master", 0), "pt-master-0"),
    # kubeflow/mpi-operator@v0.8.2:pkg/controller/mpi_job_controller.go: Hostname = <job>-launcher, <job>-worker-<i>
    ("mpijob-launcher", mpijob_v2({"Launcher": 1, "Worker": 2}, name="mj"), ReplicaId("Launcher", 0), "mj-launcher"),
    ("mpijob-worker", mpijob_v2({"Launcher": 1, "Worker": 2}, name="mj"), ReplicaId("Worker", 1), "mj-worker-1"),
    # kubeflow/training-operator@v1.9.0:pkg/controller.v1/mpi/mpijob.go: the launcher pod is named <job>-launcher
    ("mpijob-v1-launcher", mpijob_v1({"Launcher": 1, "Worker": 1}, name="m1"), ReplicaId("Launcher", 0), "m1-launcher"),
    # JobSet's Indexed Job <job>-node-0, whose pod of index i the Job controller names <job>-node-0-<i>
    ("trainjob-node", trainjob(name="tj", trainer={"numNodes": 2}), ReplicaId("node", 1), "tj-node-0-1"),
]


@pytest.mark.parametrize(("manifest", "replica", "hostname"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_hostname(manifest: dict[str, Any], replica: ReplicaId, hostname: str) -> None:
    job = load_manifest(manifest)
    assert kind_of(job).pod_hostname(job, replica) == hostname

"""An MPIJob on a cluster that serves v2beta1 (mpi-operator), only v1 (training-operator) or neither: the
version submitted, and the conversion between the two."""

from __future__ import annotations

import pytest

from kftrain.errors import KftrainError
from kftrain.job import render_manifest
from kftrain.job.kinds.mpijob import MPIImplementation, to_v1, to_v2beta1
from testbed.fake_k8s import FakeKube, OperatorSim
from testbed.k8s_harness import make_backend, mpi_job, s_success
from testbed.reference import CRD_DIR, schemas_in


def test_mpijob_v2beta1_served(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_success
    backend, out = make_backend(kube)
    result = backend.run(mpi_job("kubeflow.org/v1"), timeout=20)  # built for v1, cluster serves v2beta1
    assert result.succeeded, result.describe()
    (created,) = kube.created
    assert created["apiVersion"] == "kubeflow.org/v2beta1"
    assert "mainContainer" not in created["spec"]
    text = out.getvalue()
    assert "[launcher-0] hello from launcher-0" in text and "[worker-1] hello from worker-1" in text


def test_mpijob_only_v1_served(kube: FakeKube, operator: OperatorSim) -> None:
    kube.served["mpijobs"] = ["v1"]
    operator.scenario = s_success
    backend, out = make_backend(kube)
    job = mpi_job()
    job.spec.ssh_auth_mount_path = "/home/mpiuser/.ssh"
    job.spec.mpi_implementation = MPIImplementation.OPENMPI
    result = backend.run(job, timeout=20)
    assert result.succeeded, result.describe()
    (created,) = kube.created
    assert created["apiVersion"] == "kubeflow.org/v1"
    for key in ("sshAuthMountPath", "launcherCreationPolicy", "runLauncherAsWorker", "mpiImplementation"):
        assert key not in created["spec"]
    for rspec in created["spec"]["mpiReplicaSpecs"].values():
        assert rspec["template"]["spec"]["containers"][0]["name"] == "mpi"
    assert "serves MPIJob kubeflow.org/v1" in out.getvalue()
    assert "[launcher-0] hello" in out.getvalue()


def test_no_mpijob_served(kube: FakeKube) -> None:
    kube.served["mpijobs"] = []
    backend, _ = make_backend(kube)
    with pytest.raises(KftrainError, match="no MPIJob CRD is served"):
        backend.submit(mpi_job())


def test_mpijob_conversion_round_trip() -> None:
    schemas = schemas_in(CRD_DIR) if CRD_DIR.is_dir() else None
    v2 = mpi_job()
    v1 = to_v1(v2)
    assert v1.api_version == "kubeflow.org/v1"
    assert all(r.template.spec.containers[0].name == "mpi" for r in v1.replica_specs.values())
    back = to_v2beta1(v1)
    assert render_manifest(back) == render_manifest(v2) | {"spec": render_manifest(back)["spec"]}
    assert back.api_version == "kubeflow.org/v2beta1"
    assert back.spec.main_container is None
    if schemas is not None:
        assert schemas.errors(render_manifest(v1)) == []
        assert schemas.errors(render_manifest(back)) == []
    v2.spec.run_launcher_as_worker = True
    with pytest.raises(KftrainError, match="runLauncherAsWorker"):
        to_v1(v2)

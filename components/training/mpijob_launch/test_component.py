"""mpijob_launch renders a v2beta1 MPIJob by default and a v1 one on request, both valid against the CRDs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import kftrain.launch
from kftrain.job import load_manifest, render_manifest
from kftrain.job.crd_schema import CRDSchemas
from kftrain.launch import inject_artifact_env, job_from_inputs
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from tests.conftest import REFERENCE_DIR

URIS = {
    "KFTRAIN_DATASET_URI": "/data/ds",
    "KFTRAIN_MODEL_URI": "/data/model",
    "KFTRAIN_CHECKPOINT_URI": "/data/model-checkpoints",
}


@pytest.fixture(scope="module")
def crd_schemas() -> CRDSchemas:
    crds = REFERENCE_DIR / "crds"
    if not crds.is_dir():
        pytest.skip(f"reference data not available: {crds} is missing (the operators' CRDs)")
    return CRDSchemas.from_dir(crds)


def render(monkeypatch, tmp_path, **inputs: Any) -> dict[str, Any]:
    """Run the component's body with launch_step replaced; return the manifest it would launch."""
    seen: dict[str, Any] = {}

    def fake_launch_step(**kw: Any) -> Any:
        if kw["manifest"].strip():
            job = load_manifest(kw["manifest"])
            job.metadata.name = kw["inputs"].name
        else:
            job = job_from_inputs(kw["inputs"])
        inject_artifact_env(job, URIS)
        seen["manifest"] = render_manifest(job)
        return SimpleNamespace(duration_s=0.0)

    monkeypatch.setattr(kftrain.launch, "launch_step", fake_launch_step)
    model = SimpleNamespace(uri=str(tmp_path / "model"), metadata={})
    mpijob_launch.python_func(
        dataset=SimpleNamespace(uri="/data/ds"),
        model=model,
        job=str(tmp_path / "job"),
        run_id="run-1",
        task_id="task-1",
        **inputs,
    )
    seen["metadata"] = model.metadata
    return seen["manifest"]


def _launcher(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def test_default_is_a_v2beta1_mpijob_valid_against_the_crd(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path, workers=3, slots_per_worker=2, cpu="1", memory="2Gi")
    assert m["apiVersion"] == "kubeflow.org/v2beta1" and m["kind"] == "MPIJob"
    assert crd_schemas.errors(m) == []
    assert m["spec"]["slotsPerWorker"] == 2
    assert m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "command" not in worker, "MPI workers run sshd, not the program"
    launcher = _launcher(m)
    assert launcher["command"][0] == "mpirun"
    assert "$(KFTRAIN_DATASET_URI)" in launcher["args"]
    assert launcher["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert m["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_v2beta1_only_fields(monkeypatch, tmp_path, crd_schemas):
    m = render(
        monkeypatch,
        tmp_path,
        launcher_creation_policy="WaitForWorkersReady",
        run_launcher_as_worker=True,
        ssh_auth_mount_path="/home/mpiuser/.ssh",
        mpi_implementation="Intel",
        restart_policy="ExitCode",
        backoff_limit=2,
        active_deadline_seconds=600,
        clean_pod_policy="All",
        gpus=1,
    )
    assert crd_schemas.errors(m) == []
    spec = m["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runLauncherAsWorker"] is True
    assert spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert spec["mpiImplementation"] == "Intel"
    assert spec["runPolicy"] == {"cleanPodPolicy": "All", "activeDeadlineSeconds": 600, "backoffLimit": 2}
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "ExitCode"
    assert _launcher(m)["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_v1_on_request_valid_against_the_training_operator_crd(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path, api_version="kubeflow.org/v1", workers=2, slots_per_worker=1)
    assert m["apiVersion"] == "kubeflow.org/v1"
    assert crd_schemas.errors(m) == []
    assert m["metadata"]["name"].startswith("mpijob-")
    for rtype in ("Launcher", "Worker"):
        (container,) = m["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["containers"]
        assert container["name"] == "mpi", "training-operator injects its env into the container named mpi"
    env = {e["name"]: e["value"] for e in _launcher(m)["env"]}
    assert env["KFTRAIN_MODEL_URI"] == "/data/model"


@pytest.mark.parametrize(
    "field, value",
    [
        ("launcher_creation_policy", "AtStartup"),
        ("run_launcher_as_worker", True),
        ("ssh_auth_mount_path", "/root/.ssh"),
        ("mpi_implementation", "MPICH"),
    ],
)
def test_v2beta1_only_fields_are_refused_for_v1(monkeypatch, tmp_path, capsys, field, value):
    with pytest.raises(SystemExit):
        render(monkeypatch, tmp_path, api_version="kubeflow.org/v1", **{field: value})
    assert field in capsys.readouterr().err


def test_unknown_api_version_is_refused(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        render(monkeypatch, tmp_path, api_version="kubeflow.org/v2")
    assert "v2beta1" in capsys.readouterr().err


def test_a_manifest_replaces_the_typed_inputs(monkeypatch, tmp_path, crd_schemas):
    text = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: from-manifest}
spec:
  slotsPerWorker: 4
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template: {spec: {containers: [{name: l, image: x, command: [mpirun, prog]}]}}
    Worker:
      replicas: 1
      template: {spec: {containers: [{name: w, image: x}]}}
"""
    m = render(monkeypatch, tmp_path, manifest=text)
    assert m["spec"]["slotsPerWorker"] == 4
    assert crd_schemas.errors(m) == []

"""mpijob_launch renders a v2beta1 MPIJob by default and a v1 one on request, both valid against the CRDs."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain_components.training.mpijob_launch.component import mpijob_launch
from testbed.launch_harness import check_local_run, launch_renderer
from testbed.manifests import as_yaml, mpijob_v2, replica

_render = launch_renderer(mpijob_launch, "MPIJob")


def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, **inputs: Any) -> dict[str, Any]:
    """The manifest mpijob_launch would launch for ``inputs``."""
    return _render(monkeypatch, tmp_path, **inputs).manifest


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
        restart_policy="Never",
        backoff_limit=2,
        active_deadline_seconds=600,
        clean_pod_policy="All",
        gpus=1,
        image="example.com/hvd-gpu:1",
    )
    assert crd_schemas.errors(m) == []
    spec = m["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runLauncherAsWorker"] is True
    assert spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert spec["mpiImplementation"] == "Intel"
    assert spec["runPolicy"] == {"cleanPodPolicy": "All", "activeDeadlineSeconds": 600, "backoffLimit": 2}
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    assert _launcher(m)["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_v1_on_request_valid_against_the_training_operator_crd(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path, api_version="kubeflow.org/v1", workers=2, slots_per_worker=1)
    assert m["apiVersion"] == "kubeflow.org/v1"
    assert crd_schemas.errors(m) == []
    assert m["metadata"]["name"].startswith("mpijob-")
    for rtype in ("Launcher", "Worker"):
        (container,) = m["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["containers"]
        assert container["name"] == "mpi", "training-operator injects its env into the container named mpi"
    env = {e["name"]: e.get("value") for e in _launcher(m)["env"]}  # (the storage secret's are secretKeyRefs)
    assert env["KFTRAIN_MODEL_URI"] == str(tmp_path / "model")


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


def test_a_restart_policy_mpi_operator_refuses_names_the_input(monkeypatch, tmp_path, capsys, crd_schemas):
    """mpi-operator v0.8.2 takes Never and OnFailure only (its controller refuses the rest and never runs the job);
    training-operator's v1 MPIJob takes ExitCode."""
    with pytest.raises(SystemExit):
        render(monkeypatch, tmp_path, restart_policy="ExitCode")
    assert "restart_policy: 'ExitCode' is not one MPIJob v2beta1 takes: Never, OnFailure" in capsys.readouterr().err
    m = render(monkeypatch, tmp_path, api_version="kubeflow.org/v1", restart_policy="ExitCode", backoff_limit=0)
    assert crd_schemas.errors(m) == []


def test_unknown_api_version_is_refused(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        render(monkeypatch, tmp_path, api_version="kubeflow.org/v2")
    assert "v2beta1" in capsys.readouterr().err


def test_a_manifest_replaces_the_typed_inputs(monkeypatch, tmp_path, crd_schemas):
    replicas = {"Launcher": replica(1, "l", ["mpirun", "prog"], image="x"), "Worker": replica(1, "w", image="x")}
    text = as_yaml(mpijob_v2(replicas, name="from-manifest", slotsPerWorker=4))
    m = render(monkeypatch, tmp_path, manifest=text)
    assert m["spec"]["slotsPerWorker"] == 4
    assert crd_schemas.errors(m) == []


def test_a_local_run_runs_the_job_on_the_local_backend(kfp_local):
    """KFP's local runner runs the component as a task: the step runs its MPIJob here, replica by replica."""
    check_local_run(mpijob_launch, "MPIJob", {"launcher-0"}, workers=1)

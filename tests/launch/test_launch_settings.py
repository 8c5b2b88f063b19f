"""The launch components' platform inputs, through each component's own function: every setting on every replica,
manifests keeping their own values, the MPI launcher kept GPU-free, and bad inputs refused by name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from kftrain import images
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from testbed.launch_harness import SETTINGS, render_launch
from testbed.manifests import as_yaml, mpijob_v2, pytorchjob, replica, tfjob


@dataclass(frozen=True)
class Kind:
    id: str
    component: Any
    replica_key: str
    manifest: str  # a manifest of the kind, with settings of its own where precedence is checked
    inputs: dict[str, Any]


def own_replica(replicas: int, container: str, command: list[str]) -> dict[str, Any]:
    """A replica with settings of its own: its service account, node selector and cpu."""
    pod = {
        "serviceAccountName": "manifest-sa",
        "nodeSelector": {"pool": "cpu"},
        "containers": [
            {
                "name": container,
                "image": "x",
                "command": command,
                "resources": {"limits": {"cpu": "8"}, "requests": {"cpu": "8"}},
            }
        ],
    }
    return {"replicas": replicas, "template": {"spec": pod}}


TRAIN = ["python", "train.py"]
PYTORCH_MANIFEST = as_yaml(
    pytorchjob(
        {"Master": own_replica(1, "pytorch", TRAIN), "Worker": replica(1, "pytorch", TRAIN, image="x")}, name="own"
    )
)
TF_MANIFEST = as_yaml(tfjob({"Worker": own_replica(2, "tensorflow", TRAIN)}, name="own"))
MPI_MANIFEST = as_yaml(
    mpijob_v2(
        {"Launcher": own_replica(1, "launcher", ["mpirun", *TRAIN]), "Worker": replica(2, "worker", image="x")},
        name="own",
        slotsPerWorker=1,
    )
)

KINDS = [
    Kind("pytorchjob", pytorchjob_launch, "pytorchReplicaSpecs", PYTORCH_MANIFEST, {"workers": 2}),
    Kind("tfjob", tfjob_launch, "tfReplicaSpecs", TF_MANIFEST, {"workers": 2}),
    # GPUs are asked for below, and this release's Horovod image is CPU-only: the MPIJob names its own image.
    Kind("mpijob", mpijob_launch, "mpiReplicaSpecs", MPI_MANIFEST, {"workers": 2, "image": "example.com/hvd-gpu:1"}),
]


def _pods(manifest: dict[str, Any], replica_key: str) -> dict[str, dict[str, Any]]:
    return {rtype: spec["template"]["spec"] for rtype, spec in manifest["spec"][replica_key].items()}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
@pytest.mark.parametrize("source", ["typed", "manifest"])
def test_every_setting_reaches_every_replica(kind, source, monkeypatch, tmp_path, crd_schemas):
    inputs = {**kind.inputs, **SETTINGS, **({"manifest": kind.manifest} if source == "manifest" else {})}
    rendered = render_launch(kind.component, monkeypatch, tmp_path, **inputs)
    m = rendered.manifest
    assert crd_schemas.errors(m) == []
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    run_policy = m["spec"]["runPolicy"]
    assert run_policy["schedulingPolicy"] == {"queue": "volcano-a", "minAvailable": 2}
    assert run_policy["ttlSecondsAfterFinished"] == 600
    for rtype, pod in _pods(m, kind.replica_key).items():
        trains = not (kind.id == "mpijob" and rtype == "Launcher")
        main = pod["containers"][0]
        own = source == "manifest" and rtype == _first_type(kind)  # the replica that brings its own settings
        assert pod["serviceAccountName"] == ("manifest-sa" if own else "trainer"), rtype
        assert pod["nodeSelector"] == ({"pool": "cpu"} if own else {"pool": "gpu"}), rtype
        assert pod["tolerations"] == SETTINGS["tolerations"]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["priorityClassName"] == "training"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["pvc-datasets"]["persistentVolumeClaim"] == {"claimName": "datasets"}
        secret = {"secretName": "mlpipeline-minio-artifact", "optional": True}
        assert volumes["kftrain-object-store"]["secret"] == secret
        assert ("kftrain-shm" in volumes) is trains, rtype
        mounts = {v["mountPath"]: v["name"] for v in main["volumeMounts"]}
        assert mounts["/data"] == "pvc-datasets" and "/var/run/secrets/kftrain/object-store" in mounts
        assert ("/dev/shm" in mounts) is trains
        limits = main["resources"]["limits"]
        assert limits["cpu"] == ("8" if own else "2")
        assert ("nvidia.com/gpu" in limits) is trains, f"{rtype}: GPUs only where training runs"
        env = _env(main)
        assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
        assert env["AWS_ACCESS_KEY_ID"] == {
            "secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": "accesskey", "optional": True}
        }
        assert env["KFTRAIN_MODEL_URI"] == str(tmp_path / "model")


def _first_type(kind: Kind) -> str:
    return {"pytorchjob": "Master", "tfjob": "Worker", "mpijob": "Launcher"}[kind.id]


def test_mpi_launcher_gets_no_gpu_and_no_shm_even_with_both_asked(monkeypatch, tmp_path):
    m = render_launch(mpijob_launch, monkeypatch, tmp_path, gpus=2, shm_size="4Gi", image="example.com/hvd:1").manifest
    launcher = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "nvidia.com/gpu" not in launcher["containers"][0].get("resources", {}).get("limits", {})
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    volumes = [{v["name"]: v for v in spec.get("volumes") or []} for spec in (launcher, worker)]
    assert "kftrain-shm" not in volumes[0]  # (both get the storage secret's volume)
    assert volumes[1]["kftrain-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}


def test_a_secret_value_never_appears_in_the_job(monkeypatch, tmp_path):
    canary = "canary-5e9f3c-never-print-me"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    monkeypatch.setenv("WANDB_API_KEY", canary)
    for kind in KINDS:
        m = render_launch(kind.component, monkeypatch, tmp_path, **kind.inputs, **SETTINGS).manifest
        assert canary not in json.dumps(m), kind.id


@pytest.mark.parametrize(
    ("component", "gpus", "expected"),
    [
        (pytorchjob_launch, 0, "python-pytorch-cpu"),
        (pytorchjob_launch, 1, "python-pytorch-cuda"),
        (tfjob_launch, 0, "python-tensorflow-cpu"),
        (tfjob_launch, 2, "python-tensorflow-cuda"),
        (mpijob_launch, 0, "python-horovod-pytorch-cpu"),
    ],
)
def test_the_default_trainer_image_is_the_cpu_build_unless_the_replicas_get_gpus(
    component, gpus, expected, monkeypatch, tmp_path
):
    m = render_launch(component, monkeypatch, tmp_path, gpus=gpus).manifest
    key = next(k for k in m["spec"] if k.endswith("ReplicaSpecs"))
    found = {spec["template"]["spec"]["containers"][0]["image"] for spec in m["spec"][key].values()}
    assert found == {images.image(expected.rsplit("-", 1)[0], expected.rsplit("-", 1)[1])}


def test_a_gpu_mpijob_without_an_image_is_refused_naming_the_input(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        render_launch(mpijob_launch, monkeypatch, tmp_path, gpus=1)
    assert exc.value.code == 2
    assert "image: this release has no cuda build of python-horovod-pytorch" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"secret_env": {"TOKEN": "no-slash"}}, "secret_env.TOKEN"),
        ({"secret_env": {"1BAD": "s/k"}}, "secret_env.1BAD"),  # IsEnvVarName allows "-", not a leading digit
        ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"kee": "a"}]}, "tolerations[0].kee"),
        ({"tolerations": {"key": "a"}}, "tolerations"),
        ({"node_selector": {"pool": [3]}}, "node_selector.pool"),  # a number is the string it means; a list is not
        ({"pvc_mounts": {"data": "claim"}}, "pvc_mounts.data"),
        ({"pvc_mounts": {"/data": "Bad_Claim"}}, "pvc_mounts./data"),
        ({"shm_size": "lots"}, "shm_size"),
        ({"memory": "4 GB"}, "memory"),
        ({"gpus": -1}, "gpus"),
        ({"service_account": "Not Valid"}, "service_account"),
        ({"image_pull_secrets": ["ok", "NO"]}, "image_pull_secrets[1]"),
        ({"scheduling": {"minAvailble": 2}}, "scheduling.minAvailble"),
        ({"restart_policy": "Sometimes"}, "restart_policy"),
        ({"run_id": "{{$.pipeline_job_uuid}}", "task_id": "t"}, "run_id"),
        ({"run_id": "r", "task_id": ""}, "task_id"),
    ],
)
def test_bad_inputs_are_refused_by_name_before_anything_runs(inputs, field, monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        render_launch(pytorchjob_launch, monkeypatch, tmp_path, **inputs)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"ERROR: {field}" in err, err


def test_run_and_task_come_from_the_output_uri_when_not_given(monkeypatch, tmp_path):
    """No run_id/task_id inputs: the job is named after the run and task in the Model output's URI."""
    run = tmp_path / "pytorch-digits-2026-11-23-10-00-00-000000" / "pytorchjob-launch"
    first = render_launch(pytorchjob_launch, monkeypatch, run, run_id="", task_id="").manifest
    again = render_launch(pytorchjob_launch, monkeypatch, run, run_id="", task_id="").manifest
    other = render_launch(pytorchjob_launch, monkeypatch, run.parent / "evaluate", run_id="", task_id="").manifest
    assert first["metadata"]["name"] == again["metadata"]["name"] != other["metadata"]["name"]
    labels = first["metadata"]["labels"]
    assert labels["kftrain.io/run-id"] == "pytorch-digits-2026-11-23-10-00-00-000000"
    assert labels["kftrain.io/task-id"] == "pytorchjob-launch"


def test_auto_is_local_outside_a_kfp_task_pod(monkeypatch, tmp_path):
    from kftrain.backends import KubernetesConfig, LocalConfig

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # a pod, e.g. a notebook's
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    assert isinstance(render_launch(pytorchjob_launch, monkeypatch, tmp_path).config, LocalConfig)
    monkeypatch.setenv("KFP_POD_NAME", "run-abc-launch-123")
    assert isinstance(render_launch(pytorchjob_launch, monkeypatch, tmp_path).config, KubernetesConfig)

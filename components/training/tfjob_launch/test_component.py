"""tfjob_launch renders a TFJob from its typed inputs (or takes a manifest), valid against the training-operator CRD."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain_components.training.tfjob_launch.component import tfjob_launch
from testbed.launch_harness import check_local_run, launch_renderer
from testbed.manifests import as_yaml, replica, tfjob

_render = launch_renderer(tfjob_launch, "TFJob")


def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, **inputs: Any) -> dict[str, Any]:
    """The manifest tfjob_launch would launch for ``inputs``."""
    rendered = _render(monkeypatch, tmp_path, **inputs)
    # The framework is what the trainer recorded in model.json; nothing ran here, so nothing is claimed.
    assert rendered.model_metadata["framework"] == ""
    assert rendered.model_metadata["job"] == rendered.manifest["metadata"]["name"]
    return rendered.manifest


def _container(manifest: dict[str, Any], rtype: str) -> dict[str, Any]:
    (container,) = manifest["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"]
    return container


def test_default_is_two_workers_running_the_tf_trainer(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path, args=["--epochs", 5.0])
    assert m["kind"] == "TFJob" and m["apiVersion"] == "kubeflow.org/v1"
    assert crd_schemas.errors(m) == []
    assert list(m["spec"]["tfReplicaSpecs"]) == ["Worker"]
    assert m["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2
    worker = _container(m, "Worker")
    assert worker["name"] == "tensorflow", "the operator sets TF_CONFIG on the container named tensorflow"
    assert worker["command"] == ["python", "-m", "kftrain.programs.tf_distributed"]
    assert worker["args"][-2:] == ["--epochs", "5"], "pipeline ints arrive as floats"
    assert "$(KFTRAIN_CHECKPOINT_URI)" in worker["args"]
    assert worker["image"].split("/")[-1].startswith("python-tensorflow-cpu:")
    assert m["metadata"]["name"].startswith("tfjob-")


def test_chief_ps_workers_evaluator_and_run_policy(monkeypatch, tmp_path, crd_schemas):
    m = render(
        monkeypatch,
        tmp_path,
        chief=1,
        ps=2,
        workers=3,
        evaluator=1,
        restart_policy="ExitCode",
        backoff_limit=2,
        active_deadline_seconds=600,
        clean_pod_policy="All",
        cpu="1",
        memory="2Gi",
        gpus=1,
        env={"EXTRA": "1"},
    )
    assert crd_schemas.errors(m) == []
    specs = m["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}
    assert all(v["restartPolicy"] == "ExitCode" for v in specs.values())
    assert m["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "activeDeadlineSeconds": 600, "backoffLimit": 2}
    chief = _container(m, "Chief")
    assert chief["resources"]["limits"] == {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": 1}
    env = {e["name"]: e.get("value") for e in chief["env"]}  # (the storage secret's are secretKeyRefs)
    assert env["EXTRA"] == "1" and env["KFTRAIN_MODEL_URI"] == str(tmp_path / "model")


@pytest.mark.parametrize(
    "inputs, field",
    [({"chief": 2}, "chief"), ({"evaluator": 3}, "evaluator"), ({"ps": 1}, "chief"), ({"workers": -1}, "workers")],
)
def test_bad_replica_counts_are_refused(monkeypatch, tmp_path, capsys, inputs, field):
    with pytest.raises(SystemExit):
        render(monkeypatch, tmp_path, **inputs)
    assert field in capsys.readouterr().err


def test_a_manifest_replaces_the_typed_inputs(monkeypatch, tmp_path, crd_schemas):
    train = ["python", "train.py"]
    replicas = {
        "Chief": replica(1, "tensorflow", train, image="x"),
        "Worker": replica(4, "tensorflow", train, image="x"),
    }
    text = as_yaml(tfjob(replicas, name="from-manifest"))
    m = render(monkeypatch, tmp_path, manifest=text, workers=1)
    assert m["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 4
    assert crd_schemas.errors(m) == []


def test_a_program_of_the_users_own_gets_only_its_own_args(monkeypatch, tmp_path):
    """With a command of its own, a replica runs exactly command + args; the URIs reach it as environment only."""
    m = render(monkeypatch, tmp_path, command=["python", "my_train.py"], args=["--strict"])
    worker = _container(m, "Worker")
    assert worker["command"] == ["python", "my_train.py"] and worker["args"] == ["--strict"]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["KFTRAIN_MODEL_URI"] == str(tmp_path / "model") and env["KFTRAIN_DATASET_URI"] == "/data/ds"


def test_a_local_run_runs_the_job_on_the_local_backend(kfp_local):
    """KFP's local runner runs the component as a task: the step runs its TFJob here, replica by replica."""
    check_local_run(tfjob_launch, "TFJob", {"worker-0", "worker-1"}, workers=2)

"""pytorchjob_launch renders a PyTorchJob from its typed inputs (or takes a manifest), valid against the
training-operator CRD: DDP with a Master by default, an elastic job (Workers only, the operator's elasticPolicy,
torchrun) when elastic_max_workers is set."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from testbed.launch_harness import check_local_run, launch_renderer, render_launch
from testbed.manifests import as_yaml, pytorchjob, replica

_render = launch_renderer(pytorchjob_launch, "PyTorchJob")


def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, **inputs: Any) -> dict[str, Any]:
    """The manifest pytorchjob_launch would launch for ``inputs``."""
    return _render(monkeypatch, tmp_path, **inputs).manifest


def _container(manifest: dict[str, Any], rtype: str) -> dict[str, Any]:
    (container,) = manifest["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]
    return container


def test_default_is_a_master_and_a_worker_with_one_process_each(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path)
    assert crd_schemas.errors(m) == []
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Master", "Worker"]
    assert m["spec"]["nprocPerNode"] == "1"  # not the operator's default, auto (a process per core or GPU)
    assert "elasticPolicy" not in m["spec"]
    assert _container(m, "Worker")["command"] == ["python", "-m", "kftrain.programs.torch_ddp"]


@pytest.mark.parametrize("nproc", ["2", "auto"])
def test_several_processes_per_replica_run_the_default_program_under_torchrun(nproc, monkeypatch, tmp_path):
    # The operator's WORLD_SIZE counts nprocPerNode processes per replica; python alone would start one.
    m = render(monkeypatch, tmp_path, nproc_per_node=nproc)
    assert m["spec"]["nprocPerNode"] == nproc
    for rtype in ("Master", "Worker"):
        assert _container(m, rtype)["command"] == ["torchrun", "--module", "kftrain.programs.torch_ddp"]
        assert _container(m, rtype)["args"][:2] == ["--dataset", "$(KFTRAIN_DATASET_URI)"]


def test_elastic_inputs_render_the_operators_elastic_policy(monkeypatch, tmp_path, crd_schemas):
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    m = render(
        monkeypatch,
        tmp_path,
        workers=3,
        elastic_min_workers=2,
        elastic_max_workers=4,
        elastic_max_restarts=10,
        elastic_rdzv_conf={"join_timeout": 600, "last_call_timeout": "30"},
        elastic_metrics=[metric],
        args=["--global-batch-size", 48.0],
    )
    assert crd_schemas.errors(m) == []
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Worker"]  # the rendezvous replaces the Master
    assert m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert m["spec"]["nprocPerNode"] == "1"
    assert m["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "rdzvConf": [{"key": "join_timeout", "value": "600"}, {"key": "last_call_timeout", "value": "30"}],
        "maxRestarts": 10,
        "metrics": [metric],
    }
    worker = _container(m, "Worker")
    assert worker["command"] == ["torchrun", "--module", "kftrain.programs.torch_ddp"]
    assert worker["args"][-2:] == ["--global-batch-size", "48"]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_the_users_env_and_command_win_over_the_elastic_defaults(monkeypatch, tmp_path):
    m = render(
        monkeypatch,
        tmp_path,
        elastic_max_workers=2,
        command=["python", "train.py"],
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
    )
    worker = _container(m, "Worker")
    assert worker["command"] == ["python", "train.py"]
    assert {e["name"]: e.get("value") for e in worker["env"]}["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"
    assert m["spec"]["elasticPolicy"]["minReplicas"] == 1


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"elastic_min_workers": 2}, "elastic_max_workers"),
        ({"elastic_rdzv_conf": {"join_timeout": "5"}}, "elastic_max_workers"),
        ({"elastic_max_workers": 2, "elastic_min_workers": 3}, "elastic_max_workers"),
        ({"elastic_max_workers": 4, "elastic_min_workers": 2, "workers": 1}, "workers"),
        ({"elastic_max_workers": 2, "elastic_max_restarts": -1}, "elastic_max_restarts"),
        ({"elastic_max_workers": 2, "elastic_rdzv_backend": "zookeeper"}, "elastic_rdzv_backend"),
        ({"elastic_max_workers": 2, "elastic_rdzv_conf": {"a=b": "1"}}, "elastic_rdzv_conf"),
        ({"elastic_max_workers": 2, "elastic_metrics": [{"resource": {}}]}, "elastic_metrics[0]"),
    ],
)
def test_bad_elastic_inputs_are_refused_by_name(inputs, field, monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        render_launch(pytorchjob_launch, monkeypatch, tmp_path, **inputs)
    assert exc.value.code == 2
    assert f"ERROR: {field}: " in capsys.readouterr().err


def test_a_manifests_elastic_policy_is_kept(monkeypatch, tmp_path, crd_schemas):
    elastic = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d", "maxRestarts": 5}
    manifest = pytorchjob(
        {"Worker": replica(2, "pytorch", ["torchrun", "train.py"])}, name="mine", elasticPolicy=elastic
    )
    m = render(monkeypatch, tmp_path, manifest=as_yaml(manifest), elastic_max_workers=8)
    assert crd_schemas.errors(m) == []
    assert m["spec"]["elasticPolicy"] == manifest["spec"]["elasticPolicy"]  # its own settings win
    assert _container(m, "Worker")["command"] == ["torchrun", "train.py"]


def test_a_local_run_runs_the_job_on_the_local_backend(kfp_local):
    """KFP's local runner runs the component as a task: the step runs its PyTorchJob here, replica by replica."""
    check_local_run(pytorchjob_launch, "PyTorchJob", {"master-0", "worker-0"}, workers=1)

"""trainjob_launch renders a Trainer v2 TrainJob on its runtime (or takes a manifest), valid against Trainer's CRD: this
release's DDP program under torchrun on a torch runtime, mpirun of the Horovod program on an MPI runtime; what
Trainer v2.3.0 does not take is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain_components.training.trainjob_launch.component import trainjob_launch
from testbed.launch_harness import check_local_run, launch_renderer
from testbed.manifests import as_yaml, trainjob

_render = launch_renderer(trainjob_launch, "TrainJob")
URIS = ["--dataset", "$(KFTRAIN_DATASET_URI)", "--model-dir", "$(KFTRAIN_MODEL_URI)"]


def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, **inputs: Any) -> dict[str, Any]:
    """The manifest trainjob_launch would launch for ``inputs``."""
    return _render(monkeypatch, tmp_path, **inputs).manifest


def test_default_is_two_torch_nodes_running_the_ddp_program_under_torchrun(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path)
    assert (m["apiVersion"], m["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert crd_schemas.errors(m) == []
    assert m["metadata"]["name"].startswith("trainjob-")
    assert m["spec"]["runtimeRef"] == {"kind": "ClusterTrainingRuntime", "name": "torch-distributed"}
    trainer = m["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 1)
    assert trainer["command"] == ["torchrun", "-m", "kftrain.programs.torch_ddp"]
    assert trainer["args"][:4] == URIS
    assert trainer["image"].split("/")[-1].startswith("python-pytorch-cpu:")
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["KFTRAIN_MODEL_URI"] == str(tmp_path / "model") and env["KFTRAIN_DATASET_URI"] == "/data/ds"


def test_an_mpi_runtime_runs_mpirun_of_the_horovod_program(monkeypatch, tmp_path, crd_schemas):
    m = render(monkeypatch, tmp_path, runtime="deepspeed-distributed", num_nodes=3, num_proc_per_node=2)
    assert crd_schemas.errors(m) == []
    trainer = m["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)
    assert trainer["command"][0] == "mpirun" and trainer["command"][-2:] == ["-m", "kftrain.programs.horovod_torch"]
    assert trainer["image"].split("/")[-1].startswith("python-horovod-pytorch-cpu:")


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"priority_class": "high"}, "runtimePatches.node.priorityClassName"),
        ({"num_nodes": 0}, "num_nodes"),
        ({"runtime": ""}, "runtime"),
    ],
)
def test_what_a_trainjob_cannot_take_is_refused_by_name(monkeypatch, tmp_path, capsys, inputs, field):
    with pytest.raises(SystemExit) as ended:
        render(monkeypatch, tmp_path, **inputs)
    assert ended.value.code == 2
    assert f"ERROR: {field}: " in capsys.readouterr().err


def test_a_manifest_replaces_the_typed_inputs(monkeypatch, tmp_path, crd_schemas):
    trainer = {"numNodes": 4, "image": "example.com/t:1", "command": ["torchrun", "train.py"]}
    m = render(monkeypatch, tmp_path, manifest=as_yaml(trainjob(name="mine", trainer=trainer)), num_nodes=1)
    assert crd_schemas.errors(m) == []
    assert m["spec"]["trainer"]["numNodes"] == 4 and m["spec"]["trainer"]["command"] == ["torchrun", "train.py"]


def test_a_local_run_runs_the_job_on_the_local_backend(kfp_local):
    """KFP's local runner runs the component as a task: the step runs its TrainJob here, node by node."""
    check_local_run(trainjob_launch, "TrainJob", {"node-0", "node-1"}, num_nodes=2)

"""A Python function as every replica's program: through each launch component's own function, under the local
backend, as a PyTorchJob (DDP), a TFJob (TF_CONFIG) and an MPIJob (mpirun ranks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kftrain.contract import BACKEND_ENV
from kftrain.launch import function as fn
from kftrain.launch.function import MPIRUN, FunctionError, function_command
from kftrain.models import describe_model, predictor_for
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from testbed.launch_harness import kfp_outputs


def train_ddp(width: int, marker: str) -> None:
    """All-reduce over gloo, then rank 0 saves a TorchScript model as the contract says."""
    import json
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    print(f"{marker} rank {rank} of {world}: sum {total.item():.0f}", flush=True)
    if rank == 0:
        model = torch.nn.Linear(width, 2)
        folder = os.environ["KFTRAIN_MODEL_URI"]
        os.makedirs(folder, exist_ok=True)
        torch.jit.save(torch.jit.script(model), os.path.join(folder, "model.pt"))
        with open(os.path.join(folder, "model.json"), "w") as handle:
            json.dump({"task": "classification", "inputs": [{"name": "x", "shape": [-1, width]}]}, handle)
    dist.barrier()  # the Master's success ends the job: it waits until every rank has printed
    dist.destroy_process_group()


def report_tf_config() -> None:
    import json
    import os

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    print(f"tf task {task['type']}-{task['index']}", flush=True)
    if task["index"] == 0:
        folder = os.environ["KFTRAIN_MODEL_URI"]
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "cluster.json"), "w") as handle:
            handle.write(os.environ["TF_CONFIG"])


def report_mpi_rank() -> None:
    import os

    rank, size = os.environ["OMPI_COMM_WORLD_RANK"], os.environ["OMPI_COMM_WORLD_SIZE"]
    print(f"mpi rank {rank} of {size}", flush=True)
    if rank == "0":
        folder = os.environ["KFTRAIN_MODEL_URI"]
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "ranks.txt"), "w") as handle:
            handle.write(size)


def launch(component, tmp_path: Path, capfd, **inputs) -> tuple[SimpleNamespace, str]:
    """The launch component's own function, as a pipeline calls it, on the local backend."""
    model = SimpleNamespace(uri=str(tmp_path / "model"), metadata={})
    component.python_func(model=model, job=str(tmp_path / "job"), run_id="run-1", task_id="task-1", backend="local",
                          **kfp_outputs(tmp_path), **inputs)  # fmt: skip
    out, err = capfd.readouterr()
    return model, out + err


@pytest.mark.slow  # two processes importing torch and meeting over gloo
def test_a_function_as_a_pytorchjob(tmp_path, capfd):
    command = function_command(train_ddp, kwargs={"width": 3, "marker": "ddp"}, packages_to_install=["torch>=2"])
    model, log = launch(pytorchjob_launch, tmp_path, capfd, command=command, workers=1)
    assert "ddp rank 0 of 2: sum 3" in log and "ddp rank 1 of 2: sum 3" in log, log[-3000:]
    assert "installing" not in log  # torch is there: nothing is pip-installed
    spec = describe_model(model.uri)
    assert spec.format == "torchscript" and model.metadata["format"] == "torchscript"
    assert predictor_for(spec)(__import__("numpy").zeros((4, 3), "float32")).shape == (4, 2)


def test_a_function_as_a_tfjob(tmp_path, capfd):
    _, log = launch(tfjob_launch, tmp_path, capfd, command=function_command(report_tf_config), workers=2)
    assert "tf task worker-0" in log, log[-3000:]  # (worker 0's success ends the job, maybe before worker 1 prints)
    cluster = json.loads((tmp_path / "model" / "cluster.json").read_text())["cluster"]
    assert len(cluster["worker"]) == 2


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)")
def test_a_function_as_an_mpijob(tmp_path, capfd):
    command = function_command(report_mpi_rank, prefix=MPIRUN)
    _, log = launch(mpijob_launch, tmp_path, capfd, command=command, workers=2, slots_per_worker=1)
    assert "mpi rank 0 of 2" in log and "mpi rank 1 of 2" in log, log[-3000:]
    assert (tmp_path / "model" / "ranks.txt").read_text() == "2"


def test_the_command_runs_the_function_without_kftrain(tmp_path):
    def greet(name: str, times: int) -> None:
        import sys

        print(" ".join([f"hello {name}"] * times), file=sys.stdout)

    command = function_command(greet, kwargs={"name": "replica", "times": 2})
    assert command[:2] == ["sh", "-ec"] and "import kftrain" not in command[-1]
    # No PYTHONPATH: kftrain is not importable. TMPDIR: where the runner writes the program (as a replica's own
    # temporary folder, which the local backend removes with the job).
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    proc = subprocess.run([*command[:-2], command[-2].replace("exec python", f"exec {sys.executable} -I"),
                           command[-1]], capture_output=True, text=True, env=env, check=True)  # fmt: skip
    assert proc.stdout == "hello replica hello replica\n"
    assert [p.name for p in tmp_path.glob("*/kftrain_function.py")] == ["kftrain_function.py"]


GLOBAL = 3


def uses_a_global() -> None:
    print(GLOBAL + len(json.dumps({})))


def test_functions_that_depend_on_their_surroundings_are_refused_by_name():
    with pytest.raises(FunctionError, match=r"uses module-level names \(GLOBAL, json\)"):
        function_command(uses_a_global)
    width = 3

    def closure() -> None:
        print(width)

    with pytest.raises(FunctionError, match=r"uses variables of its enclosing function \(width\): pass them as kwargs"):
        function_command(closure)
    with pytest.raises(FunctionError, match="defined with def"):
        function_command(lambda: None)
    with pytest.raises(TypeError):
        function_command(report_mpi_rank, kwargs={"not json": object()})


def test_only_missing_requirements_are_installed(monkeypatch):
    """On a cluster (no KFTRAIN_BACKEND): pip-installs into the image's Python what it lacks, as the Kubeflow training
    SDK's function runner does (kubeflow/training-operator@v1.9.0:sdk/python/kubeflow/training/utils/utils.py)."""
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    calls = []
    monkeypatch.setattr(subprocess, "check_call", calls.append)
    fn.install_missing(["numpy>=1", "pyarrow"], [], BACKEND_ENV)
    assert calls == []
    fn.install_missing(
        ["numpy>=1", "numpy<0.1", "surely-not-a-kftrain-dependency==1.0"], ["https://a", "https://b"], BACKEND_ENV
    )
    (call,) = calls
    assert call[:3] == [sys.executable, "-m", "pip"] and call[-2:] == [
        "numpy<0.1",
        "surely-not-a-kftrain-dependency==1.0",
    ]
    assert (
        call[call.index("--index-url") + 1] == "https://a" and call[call.index("--extra-index-url") + 1] == "https://b"
    )


def test_a_local_replica_installs_nothing_and_names_what_is_missing(monkeypatch):
    """Locally the replica's Python is kftrain's own environment, which a run leaves as it is: one line names the
    missing requirements and how to install them, and pip is never run."""
    monkeypatch.setenv(BACKEND_ENV, "local")
    calls = []
    monkeypatch.setattr(subprocess, "check_call", calls.append)
    fn.install_missing(["numpy>=1"], [], BACKEND_ENV)  # satisfied: nothing to say
    with pytest.raises(SystemExit) as exited:
        fn.install_missing(["numpy>=1", "surely-not-a-kftrain-dependency==1.0", "numpy<0.1"], [], BACKEND_ENV)
    said = str(exited.value.code)
    assert "\n" not in said and calls == []
    assert said.startswith("the function needs surely-not-a-kftrain-dependency==1.0, numpy<0.1, not installed")
    assert "a local run installs nothing" in said
    assert f"{sys.executable} -m pip install surely-not-a-kftrain-dependency==1.0 'numpy<0.1'" in said


def test_a_function_job_with_a_missing_package_fails_locally_in_one_line(tmp_path, capfd):
    """The whole path: the local backend marks its replicas (KFTRAIN_BACKEND=local), the runner installs nothing and
    the job fails with that line among the replica's last ones."""
    command = function_command(report_tf_config, packages_to_install=["surely-not-a-kftrain-dependency==1.0"])
    with pytest.raises(SystemExit):  # the step fails, as a failed job fails it
        launch(tfjob_launch, tmp_path, capfd, command=command, workers=1, restart_policy="Never")
    log = capfd.readouterr()
    text = log.out + log.err
    assert "worker-0 exited with code 1" in text
    assert "the function needs surely-not-a-kftrain-dependency==1.0, not installed in this environment" in text
    assert "installing" not in text and not (tmp_path / "model" / "cluster.json").exists()

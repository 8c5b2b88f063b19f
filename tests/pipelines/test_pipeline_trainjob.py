"""The shipped pipelines on the TrainJob path, locally: pytorch-digits as a Trainer v2 TrainJob (torch-distributed,
2 nodes under torchrun) and horovod-digits on an MPI runtime reach the accuracy of their PyTorchJob/MPIJob paths."""

from __future__ import annotations

import json
import shutil

import pytest

from testbed import REPO_ROOT
from testbed.needs import require, requires
from testbed.pipeline_harness import accuracy_passed, assert_steps_ran, model_metadata, run_pipeline, step

pytestmark = pytest.mark.slow
REPO = REPO_ROOT


@pytest.mark.slow
@pytest.mark.e2e  # make test's TrainJob pipeline: the cheapest of this file's real ones
def test_pytorch_digits_runs_end_to_end_as_a_trainjob(tmp_path):
    require("torch")
    run = run_pipeline("pytorch-digits-trainjob", tmp_path, "--param", "epochs=12", timeout=600)
    assert_steps_ran(run.run_dir, "trainjob-launch")
    assert "[node-0]" in run.log and "[node-1]" in run.log  # two nodes, each a process
    job = json.loads((run.run_dir / "trainjob-launch" / "job").read_text())
    assert job["kind"] == "TrainJob"
    assert model_metadata(run.run_dir, "trainjob-launch")["runtime"] == "torch-distributed"
    assert accuracy_passed(run.run_dir) >= 0.95  # as pytorch-digits on a PyTorchJob


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)")
@requires("horovod", reason="scripts/build_horovod.sh builds it")
def test_horovod_digits_runs_end_to_end_as_a_trainjob_on_an_mpi_runtime(tmp_path):
    run = run_pipeline("horovod-digits-trainjob", tmp_path, "--param", "epochs=12", timeout=900)
    assert_steps_ran(run.run_dir, "trainjob-launch")
    # Only the launcher runs locally; mpirun starts both ranks (launcher + 1 node, 1 slot each).
    assert "[launcher-0]" in run.log and "rank 1/2" in run.log
    assert model_metadata(run.run_dir, "trainjob-launch")["runtime"] == "deepspeed-distributed"
    assert accuracy_passed(run.run_dir) >= 0.95


def test_train_evaluate_export_runs_the_users_program_as_a_trainjob(tmp_path):
    require("torch")
    example = REPO / "examples" / "tabular_ddp"
    run = run_pipeline(
        "train-evaluate-export", tmp_path, "--params-file", str(example / "params.yaml"),
        "--param", "job_kind=TrainJob", "--param", "num_nodes=2",
        "--param", f'command=["torchrun", "{example / "train.py"}"]',
        timeout=900, cwd=REPO,
    )  # fmt: skip
    for name in ("prepare-dataset", "trainjob-launch", "evaluate-model", "export-model"):
        assert (step(run.run_dir, name) / "executor_output.json").exists(), name  # the gate passed: exported
    assert "[node-0]" in run.log and "[node-1]" in run.log
    assert model_metadata(run.run_dir, step(run.run_dir, "trainjob-launch").name)["runtime"] == "torch-distributed"


def test_tf_digits_runs_as_a_trainjob_on_a_plain_runtime(tmp_path):
    require("tensorflow")
    run = run_pipeline("tf-digits-trainjob", tmp_path, "--param", "epochs=6", timeout=900)
    assert_steps_ran(run.run_dir, "trainjob-launch")
    assert "[node-0]" in run.log and "[node-1]" in run.log  # two MultiWorkerMirrored workers
    assert model_metadata(run.run_dir, "trainjob-launch")["runtime"] == "tensorflow-plain"
    assert accuracy_passed(run.run_dir) >= 0.9

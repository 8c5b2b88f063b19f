"""The shipped pipelines on the TrainJob path, locally: pytorch-digits as a Trainer v2 TrainJob (torch-distributed,
2 nodes under torchrun) and horovod-digits on an MPI runtime reach the accuracy of their PyTorchJob/MPIJob paths."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from tests.pipeline_harness import accuracy_passed, assert_steps_ran, model_metadata, run_pipeline

pytestmark = pytest.mark.slow


def test_pytorch_digits_runs_end_to_end_as_a_trainjob(tmp_path):
    pytest.importorskip("torch")
    run = run_pipeline("pytorch-digits-trainjob", tmp_path, "--param", "epochs=12", timeout=600)
    assert_steps_ran(run.run_dir, "trainjob-launch")
    assert "[node-0]" in run.log and "[node-1]" in run.log  # two nodes, each a process
    job = json.loads((run.run_dir / "trainjob-launch" / "job").read_text())
    assert job["kind"] == "TrainJob"
    assert model_metadata(run.run_dir, "trainjob-launch")["runtime"] == "torch-distributed"
    assert accuracy_passed(run.run_dir) >= 0.95  # as pytorch-digits on a PyTorchJob


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)")
@pytest.mark.skipif(
    importlib.util.find_spec("horovod") is None, reason="Horovod not installed (scripts/build_horovod.sh)"
)
def test_horovod_digits_runs_end_to_end_as_a_trainjob_on_an_mpi_runtime(tmp_path):
    run = run_pipeline("horovod-digits-trainjob", tmp_path, "--param", "epochs=12", timeout=900)
    assert_steps_ran(run.run_dir, "trainjob-launch")
    # Only the launcher runs locally; mpirun starts both ranks (launcher + 1 node, 1 slot each).
    assert "[launcher-0]" in run.log and "rank 1/2" in run.log
    assert model_metadata(run.run_dir, "trainjob-launch")["runtime"] == "deepspeed-distributed"
    assert accuracy_passed(run.run_dir) >= 0.95

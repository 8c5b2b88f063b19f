"""pytorch-digits on the TrainJob path, locally: the same pipeline with its training run as a Trainer v2 TrainJob
(torch-distributed, 2 nodes under torchrun) reaches the accuracy of the PyTorchJob path."""

from __future__ import annotations

import json

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

"""The horovod-digits pipeline end to end with KFP's local runner: prep, MPIJob (Horovod), eval, gate, export."""

from __future__ import annotations

import shutil

import pytest

from testbed.needs import requires
from testbed.pipeline_harness import accuracy_passed, assert_launched, shared_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)"),
    requires("horovod", reason="scripts/build_horovod.sh builds it"),
]


pipeline_run = shared_run("horovod-digits", "--param", "epochs=12", timeout=900)


# make test's MPIJob pipeline (the only MPIJob one KFP's local runner runs here): one test of the run stands for it.
@pytest.mark.slow
@pytest.mark.e2e
def test_every_step_ran_and_two_ranks_trained(pipeline_run):
    run_dir, log = pipeline_run
    model_meta = assert_launched(run_dir, "mpijob-launch", "MPIJob")
    assert "[launcher-0]" in log and "[worker-" not in log
    assert "rank 0/2" in log and "rank 1/2" in log
    assert model_meta["framework"] == "pytorch" and model_meta["slots"] == 2


def test_accuracy_at_least_090(pipeline_run):
    run_dir, _ = pipeline_run
    assert accuracy_passed(run_dir) >= 0.90


def test_gate_passed_and_the_model_was_exported(pipeline_run):
    from kftrain import storage

    run_dir, _ = pipeline_run
    exported = run_dir / "export-model" / "exported"
    storage.require_complete(str(exported), verify=True)
    assert (exported / "triton" / "digits" / "1" / "model.pt").exists()
    assert (exported / "triton" / "digits-onnx" / "1" / "model.onnx").exists()

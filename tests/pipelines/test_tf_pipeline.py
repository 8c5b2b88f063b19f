"""The tf-digits pipeline end to end with KFP's local runner: prep, TFJob (MWMS), eval, gate, SavedModel export."""

from __future__ import annotations

import pytest

from testbed.needs import requires
from testbed.pipeline_harness import accuracy_passed, assert_launched, shared_run

pytestmark = [pytest.mark.slow, requires("tf_keras", reason="the TensorFlow trainer needs tensorflow + tf_keras")]


pipeline_run = shared_run("tf-digits", "--param", "epochs=6", timeout=600)


# make test's TFJob pipeline, the cheapest real one: one test of the run stands for it.
@pytest.mark.slow
@pytest.mark.e2e
def test_every_step_ran_with_two_mwms_workers(pipeline_run):
    run_dir, log = pipeline_run
    assert assert_launched(run_dir, "tfjob-launch", "TFJob")["framework"] == "tensorflow"
    assert "[worker-0]" in log and "[worker-1]" in log and "[chief-0]" not in log
    assert "mode multi_worker_mirrored" in log


def test_accuracy_at_least_090(pipeline_run):
    run_dir, log = pipeline_run
    assert accuracy_passed(run_dir) >= 0.90
    assert "passed" in log


def test_gate_passed_and_a_savedmodel_was_exported(pipeline_run):
    from kftrain import storage

    run_dir, _ = pipeline_run
    exported = run_dir / "export-model" / "exported"
    storage.require_complete(str(exported), verify=True)
    assert (exported / "tfserving" / "digits" / "1" / "saved_model.pb").is_file()
    assert (exported / "tfserving" / "digits" / "1" / "variables" / "variables.index").is_file()
    assert (exported / "triton" / "digits" / "1" / "model.savedmodel" / "saved_model.pb").is_file()

"""The tf-digits pipeline end to end with KFP's local runner: prep, TFJob (MWMS), eval, gate, SavedModel export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("tf_keras", reason="the TensorFlow trainer needs tensorflow + tf_keras")


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "run", "tf-digits", "--pipeline-root", str(root),
         "--param", "epochs=6"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return run_dir, proc.stdout + proc.stderr


def _executor_output(step_dir: Path) -> dict:
    return json.loads((step_dir / "executor_output.json").read_text())


def test_every_step_ran_with_two_mwms_workers(pipeline_run):
    run_dir, log = pipeline_run
    for step in ("prepare-dataset", "tfjob-launch", "evaluate-classifier", "export-model"):
        assert (run_dir / step / "executor_output.json").exists(), step
    assert "[worker-0]" in log and "[worker-1]" in log and "[chief-0]" not in log
    assert "mode multi_worker_mirrored" in log
    assert json.loads((run_dir / "tfjob-launch" / "job").read_text())["kind"] == "TFJob"
    model_meta = _executor_output(run_dir / "tfjob-launch")["artifacts"]["model"]["artifacts"][0]["metadata"]
    assert model_meta["framework"] == "tensorflow"


def test_accuracy_at_least_090(pipeline_run):
    run_dir, log = pipeline_run
    out = _executor_output(run_dir / "evaluate-classifier")
    assert out["parameterValues"]["Output"] is True
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["accuracy"] >= 0.90, metrics
    assert "passed" in log


def test_gate_passed_and_a_savedmodel_was_exported(pipeline_run):
    from kftrain import storage

    run_dir, _ = pipeline_run
    exported = run_dir / "export-model" / "exported"
    storage.require_complete(str(exported), verify=True)
    assert (exported / "digits" / "1" / "saved_model.pb").is_file()
    assert (exported / "digits" / "1" / "variables" / "variables.index").is_file()

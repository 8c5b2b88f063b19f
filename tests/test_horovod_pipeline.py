"""The horovod-digits pipeline end to end with KFP's local runner: prep, MPIJob (Horovod), eval, gate, export."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)"),
    pytest.mark.skipif(
        importlib.util.find_spec("horovod") is None, reason="Horovod not installed (scripts/build_horovod.sh)"
    ),
]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "run", "horovod-digits", "--pipeline-root", str(root),
         "--param", "epochs=12"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return run_dir, proc.stdout + proc.stderr


def _executor_output(step_dir: Path) -> dict:
    return json.loads((step_dir / "executor_output.json").read_text())


def test_every_step_ran_and_two_ranks_trained(pipeline_run):
    run_dir, log = pipeline_run
    for step in ("prepare-dataset", "mpijob-launch", "evaluate-classifier", "export-model"):
        assert (run_dir / step / "executor_output.json").exists(), step
    assert "[launcher-0]" in log and "[worker-" not in log
    assert "rank 0/2" in log and "rank 1/2" in log
    assert json.loads((run_dir / "mpijob-launch" / "job").read_text())["kind"] == "MPIJob"
    model_meta = _executor_output(run_dir / "mpijob-launch")["artifacts"]["model"]["artifacts"][0]["metadata"]
    assert model_meta["framework"] == "pytorch" and model_meta["slots"] == 2


def test_accuracy_at_least_090(pipeline_run):
    run_dir, _ = pipeline_run
    out = _executor_output(run_dir / "evaluate-classifier")
    assert out["parameterValues"]["Output"] is True
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["accuracy"] >= 0.90, metrics


def test_gate_passed_and_the_model_was_exported(pipeline_run):
    from kftrain import storage

    run_dir, _ = pipeline_run
    exported = run_dir / "export-model" / "exported"
    storage.require_complete(str(exported), verify=True)
    assert (exported / "digits" / "1" / "model.pt").exists()
    assert (exported / "digits-onnx" / "1" / "model.onnx").exists()

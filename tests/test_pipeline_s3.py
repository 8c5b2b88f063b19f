"""`kftrain run --storage s3` (`make run STORAGE=s3`): the whole pipeline with every artifact on s3://."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_pytorch_pipeline_keeps_its_artifacts_on_s3(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "run", "pytorch-digits", "--storage", "s3",
         "--pipeline-root", str(tmp_path), "--param", "epochs=10"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    published = {line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("s3://kftrain-local/")}
    for step, name in (("prepare-dataset", "dataset"), ("pytorchjob-launch", "model"), ("export-model", "exported")):
        uri = f"s3://kftrain-local/runs/{run_dir.name}/{step}/{name}"
        assert uri in published, (uri, published)
        recorded = json.loads((run_dir / step / "executor_output.json").read_text())["artifacts"][name]
        assert recorded["artifacts"][0]["uri"] == uri  # what KFP passed on to the next steps
        assert not list((run_dir / step).glob(f"{name}/**/*.parquet")), "data written to the local root"
    metrics = json.loads((run_dir / "evaluate-classifier" / "executor_output.json").read_text())
    assert metrics["artifacts"]["metrics"]["artifacts"][0]["metadata"]["accuracy"] >= 0.90
    # Checkpoints went next to the model, in object storage too.
    assert any("/pytorchjob-launch/model-checkpoints/ckpt-" in uri for uri in published), published

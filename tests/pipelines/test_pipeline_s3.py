"""`kftrain run --storage s3` (`make run STORAGE=s3`): the whole pipeline with every artifact on s3://."""

from __future__ import annotations

import pytest

from testbed.pipeline_harness import executor_output, run_pipeline

pytestmark = pytest.mark.slow


def test_pytorch_pipeline_keeps_its_artifacts_on_s3(tmp_path):
    run = run_pipeline("pytorch-digits", tmp_path, "--storage", "s3", "--param", "epochs=10", timeout=900)
    run_dir = run.run_dir
    published = {line.strip() for line in run.stdout.splitlines() if line.strip().startswith("s3://kftrain-local/")}
    for step, name in (("prepare-dataset", "dataset"), ("pytorchjob-launch", "model"), ("export-model", "exported")):
        uri = f"s3://kftrain-local/runs/{run_dir.name}/{step}/{name}"
        assert uri in published, (uri, published)
        recorded = executor_output(run_dir / step)["artifacts"][name]
        folder = "/" if name == "model" else ""  # the launch step records the model as its folder (folder_uri)
        assert recorded["artifacts"][0]["uri"] == uri + folder  # what KFP passed on to the next steps
        assert not list((run_dir / step).glob(f"{name}/**/*.parquet")), "data written to the local root"
    metrics = executor_output(run_dir / "evaluate-model")
    assert metrics["artifacts"]["metrics"]["artifacts"][0]["metadata"]["accuracy"] >= 0.90
    # Checkpoints went next to the model, in object storage too.
    assert any("/pytorchjob-launch/model-checkpoints/ckpt-" in uri for uri in published), published

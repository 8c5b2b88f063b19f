"""The full PyTorch pipeline, end to end, with KFP's local runner: what `make run` does."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from kftrain import storage
from kftrain.data.dataset import load_split
from testbed.pipeline_harness import assert_steps_ran, executor_output, run_pipeline, shared_run

pytestmark = pytest.mark.slow


pipeline_run = shared_run("pytorch-digits", "--param", "epochs=12", timeout=600)


def test_all_four_steps_ran_and_training_used_two_replicas(pipeline_run):
    run_dir, log = pipeline_run
    assert_steps_ran(run_dir, "pytorchjob-launch")
    assert "[master-0]" in log and "[worker-0]" in log
    assert "pytorchjob" in json.loads((run_dir / "pytorchjob-launch" / "job").read_text())["name"]


def test_dataset_artifact_has_schema_and_row_counts(pipeline_run):
    run_dir, _ = pipeline_run
    meta = executor_output(run_dir / "prepare-dataset")["artifacts"]["dataset"]["artifacts"][0]["metadata"]
    assert meta["rows"] == {"train": 1259, "validation": 179, "test": 359}  # stratified 70/10/20 of 1,797
    assert meta["format"] == "parquet" and meta["num_features"] == 64


def test_test_accuracy_at_least_090_in_kfp_metrics(pipeline_run):
    run_dir, _ = pipeline_run
    out = executor_output(run_dir / "evaluate-model")
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["accuracy"] >= 0.90
    confusion = out["artifacts"]["classification_metrics"]["artifacts"][0]["metadata"]["confusionMatrix"]
    assert len(confusion["rows"]) == 10
    assert out["parameterValues"]["passed"] is True
    assert "accuracy" in (run_dir / "evaluate-model" / "report").read_text()
    assert 'id="confusion-matrix"' in (run_dir / "evaluate-model" / "html_report").read_text()


def test_exported_torchscript_and_onnx_reproduce_the_model(pipeline_run):
    import torch

    from kftrain.models.pytorch import load_model

    run_dir, _ = pipeline_run
    model_uri = str(run_dir / "pytorchjob-launch" / "model")
    export_uri = str(run_dir / "export-model" / "exported")
    storage.require_complete(export_uri, verify=True)
    model, _ = load_model(model_uri)
    dataset_uri = str(run_dir / "prepare-dataset" / "dataset")
    x, _ = load_split(dataset_uri, "test")
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    scripted = torch.jit.load(io.BytesIO((Path(export_uri) / "triton/digits/1/model.pt").read_bytes()))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(torch.from_numpy(x)).numpy(), expected, atol=1e-5)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(Path(export_uri) / "triton/digits-onnx/1/model.onnx"))
    got = session.run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert (Path(export_uri) / "triton/digits/config.pbtxt").read_text().startswith('name: "digits"')
    manifest = (run_dir / "export-model" / "inference_service").read_text()
    assert "kind: InferenceService" in manifest and f"storageUri: {export_uri}/triton" in manifest


def test_training_is_observed_progress_curves_tensorboard_metrics_and_logs(pipeline_run):
    run_dir, log = pipeline_run
    step = run_dir / "pytorchjob-launch"
    assert re.search(r"\[kftrain\] progress: epoch \d+/12 loss [\d.e-]+ val_accuracy [\d.]+", log)
    final = executor_output(step)["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert final["epoch"] == 12 and final["val_accuracy"] >= 0.9 and final["loss"] > 0
    page = (step / "curves").read_text()
    assert page.count('data-metric="') == 2 and 'data-metric="loss"' in page and 'data-metric="val_accuracy"' in page
    (run,) = (step / "model-tensorboard").iterdir()  # the master alone reports: one series
    (events,) = run.iterdir()
    assert events.name.startswith("events.out.tfevents.")
    logs = {p.name: p.read_text() for p in (step / "model-logs").iterdir()}
    assert sorted(logs) == ["master-0.log", "worker-0.log"]
    assert "KFTRAIN_METRICS" in logs["master-0.log"] and logs["worker-0.log"]


def test_a_quiet_run_is_one_line_per_step_and_the_progress(tmp_path):
    run = run_pipeline("pytorch-digits", tmp_path, "--param", "epochs=12", timeout=600, verbose=False)
    lines = run.log.splitlines()
    assert len(lines) <= 40, run.log
    for step in ("prepare-dataset", "trainer-args", "pytorchjob-launch", "evaluate-model", "export-model"):
        assert f"[kftrain] {step}: started" in lines
        assert any(line.startswith(f"[kftrain] {step}: finished in ") for line in lines), run.log
    assert any(line.startswith("[kftrain]   progress: epoch 12/12 loss ") for line in lines), run.log
    assert "executor_input" not in run.log and "[master-0]" not in run.log

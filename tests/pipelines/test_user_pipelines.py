"""A user's own project end to end, as `make run` runs it: train-evaluate-export with training scripts that never
import kftrain (TorchScript, ONNX, a SavedModel), on partitioned Parquet with a string column; evaluation with the
task's metrics and an HTML report; Triton/TF Serving/KServe exports that reload and predict like the model."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kftrain.data.dataset import load_split
from kftrain.models import describe_model, predictor_for
from testbed import REPO_ROOT
from testbed.bundled import diabetes_table, partitioned_parquet, wine_table
from testbed.needs import require
from testbed.pipeline_harness import executor_output, run_pipeline, step

pytestmark = pytest.mark.slow

ROOT = REPO_ROOT
EXAMPLE = ROOT / "examples" / "tabular_ddp"


def run(tmp: Path, *args: str, cwd: Path = ROOT, **params: str):
    """The pipeline run with ``args``, then ``--param NAME=VALUE`` for each of ``params``."""
    param_args = [arg for name, value in params.items() for arg in ("--param", f"{name}={value}")]
    return run_pipeline("train-evaluate-export", tmp / "runs", *args, *param_args, timeout=900, cwd=cwd)


def example_command(script: str) -> str:
    """The ``command`` parameter that runs one of the example's training scripts."""
    return f'["python", "{EXAMPLE / script}"]'


def evaluation(run_dir: Path) -> tuple[dict, dict, str]:
    """The evaluation's scalar metrics, its ClassificationMetrics metadata and its HTML report."""
    folder = step(run_dir, "evaluate-model")
    out = executor_output(folder)
    assert out["parameterValues"]["passed"] is True, out["parameterValues"]
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    classification = out["artifacts"]["classification_metrics"]["artifacts"][0]["metadata"]
    return metrics, classification, (folder / "html_report").read_text()


def model_and_test_split(run_dir: Path, launch: str) -> tuple[np.ndarray, np.ndarray]:
    """The trained model's outputs on the test split, and the split's features."""
    model = describe_model(str(run_dir / launch / "model"))
    x, _ = load_split(str(run_dir / "prepare-dataset" / "dataset"), "test")
    return predictor_for(model)(x), x


def assert_never_imports_kftrain(script: Path) -> None:
    tree = ast.parse(script.read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "kftrain"], imported


def test_the_example_torchscript_binary_classifier_as_make_run_runs_it(tmp_path):
    """`make run PIPELINE=train-evaluate-export PARAMS='--params-file examples/tabular_ddp/params.yaml'`."""
    assert_never_imports_kftrain(EXAMPLE / "train.py")
    result = run(tmp_path, "--params-file", "examples/tabular_ddp/params.yaml", "--param", 'args=["--epochs","20"]')
    run_dir = result.run_dir
    assert "[master-0]" in result.log and "[worker-0]" in result.log  # DDP: a Master and a Worker
    info = json.loads((run_dir / "prepare-dataset" / "dataset" / "dataset.json").read_text())
    assert info["classes"] == ["benign", "malignant"] and info["vocabularies"]["clinic"] == ["north", "south"]
    assert describe_model(str(run_dir / "pytorchjob-launch" / "model")).format == "torchscript"

    metrics, classification, html = evaluation(run_dir)
    assert metrics["roc_auc"] >= 0.95 and metrics["accuracy"] >= 0.9, metrics
    assert classification["confusionMatrix"]["annotationSpecs"] == [
        {"displayName": "benign"},
        {"displayName": "malignant"},
    ]
    assert {"confidenceThreshold", "recall", "falsePositiveRate", "precision"} <= set(
        classification["confidenceMetrics"][0]
    )
    for figure in ("confusion-matrix", "roc-curve", "pr-curve", "training-loss", "training-accuracy"):
        assert f'id="{figure}"' in html, figure

    expected, x = model_and_test_split(run_dir, "pytorchjob-launch")
    exported = step(run_dir, "export-model") / "exported"
    import onnxruntime
    import torch

    scripted = torch.jit.load(io.BytesIO((exported / "triton/breast-cancer/1/model.pt").read_bytes()))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(torch.from_numpy(x)).numpy(), expected, atol=1e-5)
    session = onnxruntime.InferenceSession(str(exported / "triton/breast-cancer-onnx/1/model.onnx"))
    np.testing.assert_allclose(session.run(None, {"input": x})[0], expected, atol=1e-4)
    assert (exported / "triton/breast-cancer/config.pbtxt").read_text().count("dims: [ 32 ]") == 1
    manifest = yaml.safe_load((step(run_dir, "export-model") / "inference_service").read_text())
    assert manifest["metadata"]["name"] == "breast-cancer"
    assert manifest["spec"]["predictor"]["model"]["storageUri"] == str(exported / "triton")


@pytest.mark.slow
@pytest.mark.e2e  # make test's PyTorchJob pipeline: the cheapest real one (one replica, a few hundred rows)
def test_an_onnx_regressor(tmp_path):
    source = partitioned_parquet(tmp_path / "diabetes", diabetes_table(), by="sex")
    result = run(
        tmp_path, source=source, label_column="progression", task="regression",
        command=example_command("train.py"), args='["--save-as", "onnx", "--epochs", "60", "--lr", "0.02"]',
        workers="0", gate_metric="r2", gate_threshold="0.3", model_name="diabetes",
    )  # fmt: skip
    run_dir = result.run_dir
    assert describe_model(str(run_dir / "pytorchjob-launch" / "model")).format == "onnx"
    metrics, _, html = evaluation(run_dir)
    assert metrics["r2"] >= 0.3 and 30 < metrics["mae"] < 70 and metrics["rmse"] >= metrics["mae"], metrics
    for figure in ("residual-plot", "predicted-vs-actual", "training-loss"):
        assert f'id="{figure}"' in html, figure
    expected, x = model_and_test_split(run_dir, "pytorchjob-launch")
    exported = step(run_dir, "export-model") / "exported"
    assert json.loads((exported / "export.json").read_text())["targets"] == ["triton"]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(exported / "triton/diabetes/1/model.onnx"))
    np.testing.assert_allclose(session.run(None, {"input": x})[0], expected, atol=1e-4)
    config = (exported / "triton/diabetes/config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config and 'name: "output" data_type: TYPE_FP32 dims: [ 1 ]' in config


def test_a_keras_savedmodel_from_a_tfjob(tmp_path):
    require("tf_keras", reason="the example's Keras script uses tf_keras")
    assert_never_imports_kftrain(EXAMPLE / "train_keras.py")
    source = partitioned_parquet(tmp_path / "wine", wine_table(), by="alcohol_level")
    result = run(
        tmp_path, source=source, label_column="cultivar", job_kind="TFJob",
        command=example_command("train_keras.py"), args='["--epochs", "30"]',
        workers="2", gate_threshold="0.85", model_name="wine",
    )  # fmt: skip
    run_dir = result.run_dir
    assert "[worker-0]" in result.log and "[worker-1]" in result.log
    assert describe_model(str(run_dir / "tfjob-launch" / "model")).format == "savedmodel"
    metrics, classification, html = evaluation(run_dir)
    assert metrics["accuracy"] >= 0.85 and "roc_auc" not in metrics, metrics
    assert len(classification["confusionMatrix"]["rows"]) == 3
    assert 'id="confusion-matrix"' in html and "barbera" in html

    import tensorflow as tf

    expected, x = model_and_test_split(run_dir, "tfjob-launch")
    exported = step(run_dir, "export-model") / "exported"
    for folder in (exported / "triton/wine/1/model.savedmodel", exported / "tfserving/wine/1"):
        serve = tf.saved_model.load(str(folder)).signatures["serving_default"]
        (name,) = serve.structured_input_signature[1]
        got = serve(**{name: tf.constant(x)})["logits"].numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert 'platform: "tensorflow_savedmodel"' in (exported / "triton/wine/config.pbtxt").read_text()
    manifest = yaml.safe_load((step(run_dir, "export-model") / "inference_service").read_text())
    assert manifest["spec"]["predictor"]["model"]["modelFormat"] == {"name": "triton"}


def test_an_unknown_job_kind_fails_the_run_naming_it(tmp_path):
    with pytest.raises(AssertionError) as failed:  # run_pipeline asserts the run succeeded; it must not
        run(tmp_path, "--param", "job_kind=RayJob", "--param", "source=builtin:wine")
    assert "job_kind must be one of PyTorchJob, TFJob, MPIJob, TrainJob (got 'RayJob')" in str(failed.value)

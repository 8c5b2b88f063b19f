"""Export: every accepted format to Triton / TF Serving layouts and a KServe manifest, each reloaded and compared."""

from __future__ import annotations

import io
import json
import os
import re

import numpy as np
import pytest
import yaml

from kftrain import storage
from kftrain.data.dataset import load_split
from kftrain.models import kserve, predictor_for, save_model
from kftrain.steps import export as export_step
from kftrain.steps.export import ExportError, export_model
from testbed.bundled import fit_linear
from testbed.needs import require
from testbed.s3_server import ACCESS_KEY, SECRET_KEY


@pytest.fixture(scope="module")
def dataset(breast_cancer):
    return breast_cancer[1]  # the session's prepared breast cancer data (testbed/fixtures.py)


@pytest.fixture(scope="module")
def linear(dataset):
    from torch import nn

    x, y = load_split(dataset, "train")
    return fit_linear(x, y, 2, nn.CrossEntropyLoss(), epochs=100), x[:2]


def triton_tensors(config: str, kind: str) -> list[tuple[str, str, str]]:
    block = config.split(f"{kind} [")[1].split("]\n")[0]
    return re.findall(r'name: "([^"]+)" data_type: (\w+) dims: \[ ([^\]]*) \]', block)


def test_torchscript_to_triton_libtorch_and_onnx(tmp_path, dataset, linear):
    import torch

    model, example = linear
    save_model(model, str(tmp_path / "m"), example_input=example)
    report = export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"), model_name="cancer")
    out = tmp_path / "out"
    storage.require_complete(str(out), verify=True)
    assert [(e.target, e.format) for e in report.exports] == [("triton", "torchscript"), ("triton-onnx", "onnx")]
    x, _ = load_split(dataset, "test")
    assert report.rows_compared == len(x)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    scripted = torch.jit.load(io.BytesIO((out / "triton/cancer/1/model.pt").read_bytes()))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(torch.from_numpy(x)).numpy(), expected, atol=1e-5)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out / "triton/cancer-onnx/1/model.onnx"))
    np.testing.assert_allclose(session.run(None, {"input": x})[0], expected, atol=1e-4)
    config = (out / "triton/cancer/config.pbtxt").read_text()
    assert 'name: "cancer"' in config and 'platform: "pytorch_libtorch"' in config and "max_batch_size: 256" in config
    assert triton_tensors(config, "input") == [("input__0", "TYPE_FP32", "30")]
    assert triton_tensors(config, "output") == [("output__0", "TYPE_FP32", "2")]
    onnx_config = (out / "triton/cancer-onnx/config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in onnx_config
    assert triton_tensors(onnx_config, "input") == [("input", "TYPE_FP32", "30")]
    manifest = yaml.safe_load((out / "kserve/inferenceservice.yaml").read_text())
    assert manifest["kind"] == "InferenceService" and manifest["metadata"]["name"] == "cancer"
    served = manifest["spec"]["predictor"]["model"]
    assert served["modelFormat"] == {"name": "triton"} and served["storageUri"] == str(out / "triton")
    assert (out / "triton" / "cancer" / "config.pbtxt").is_file()  # the repository the manifest points at
    assert json.loads((out / "export.json").read_text())["targets"] == ["triton", "triton-onnx"]


def test_a_minio_export_is_served_from_s3_through_a_service_account(tmp_path, dataset, linear, s3_env):
    """KServe's storage initializer has no minio:// (KFP's default root): the manifest serves the same bucket as
    s3://, through a ServiceAccount naming the endpoint as KServe reads it and the user's Secret, no key in it."""
    model, example = linear
    save_model(model, str(tmp_path / "m"), example_input=example)
    bucket = s3_env.removeprefix("s3://")
    export_model(str(tmp_path / "m"), dataset, f"minio://{bucket}/run/exported", model_name="cancer")
    text = storage.read_bytes(f"{s3_env}/run/exported/kserve/inferenceservice.yaml").decode()
    service, account = yaml.safe_load_all(text)
    assert service["spec"]["predictor"]["model"]["storageUri"] == f"s3://{bucket}/run/exported/triton"
    assert service["spec"]["predictor"]["serviceAccountName"] == account["metadata"]["name"] == "cancer-storage"
    assert account["kind"] == "ServiceAccount" and account["secrets"] == [{"name": kserve.STORAGE_SECRET}]
    endpoint = os.environ["AWS_ENDPOINT_URL"]  # the moto server, plain HTTP
    assert account["metadata"]["annotations"] == {
        "serving.kserve.io/s3-endpoint": endpoint.removeprefix("http://"),
        "serving.kserve.io/s3-usehttps": "0",
    }
    assert ACCESS_KEY not in text and SECRET_KEY not in text


def test_an_https_endpoint_is_annotated_as_https():
    account = kserve.service_account("cancer-storage", "https://minio.example.com:9000")
    assert account["metadata"]["annotations"] == {
        "serving.kserve.io/s3-endpoint": "minio.example.com:9000",
        "serving.kserve.io/s3-usehttps": "1",
    }


@pytest.mark.parametrize(
    ("uri", "served"),
    [
        ("minio://b/k/triton", "s3://b/k/triton"),
        ("s3a://b/k", "s3://b/k"),
        ("s3://b/k", "s3://b/k"),
        ("gs://b/k", "gs://b/k"),
        ("/data/out/triton", "/data/out/triton"),
    ],
)
def test_the_storage_uri_is_one_kserve_downloads(uri, served):
    assert kserve.storage_uri(uri) == served


def test_a_one_dimensional_output_is_reshaped_for_triton(tmp_path, dataset):
    import torch
    from torch import nn

    class Score(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(30, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x / 100.0).squeeze(-1)  # [batch]: a binary logit

    save_model(Score(), str(tmp_path / "m"))
    export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"), targets=("triton",))
    config = (tmp_path / "out/triton/model/config.pbtxt").read_text()
    assert 'name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] }' in config


def test_onnx_model_to_triton_and_tfserving_refused(tmp_path, dataset, linear):
    model, example = linear
    save_model(model, str(tmp_path / "m"), example_input=example, format="onnx")
    with pytest.raises(ExportError, match="'tfserving' is not available for a onnx model"):
        export_model(str(tmp_path / "m"), dataset, str(tmp_path / "bad"), targets=("tfserving",))
    assert not (tmp_path / "bad").exists()
    report = export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"))
    assert [e.target for e in report.exports] == ["triton"]
    assert (tmp_path / "out/triton/model/1/model.onnx").read_bytes() == (tmp_path / "m/model.onnx").read_bytes()


def test_the_builtin_mlp_is_scripted(tmp_path, dataset):
    from kftrain.models.pytorch import MLP, MLPConfig, write_model

    config = MLPConfig(num_features=30, num_classes=2, hidden=(8,))
    write_model(str(tmp_path / "m"), MLP(config).eval(), config, [0, 1], [f"f{i}" for i in range(30)], {})
    report = export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"), model_name="digits")
    assert [e.format for e in report.exports] == ["torchscript", "onnx"]


def test_a_mismatch_publishes_nothing(tmp_path, dataset, linear, monkeypatch):
    model, example = linear
    save_model(model, str(tmp_path / "m"), example_input=example)
    real = export_step.write_onnx

    def drifting(*args, **kwargs):
        written = real(*args, **kwargs)
        predict = written.predict
        written.predict = lambda x: predict(x) + 0.01  # an export that no longer computes the same function
        return written

    monkeypatch.setattr(export_step, "write_onnx", drifting)
    with pytest.raises(ExportError, match=r"triton-onnx export \(onnx\) does not reproduce the model: max \|diff\|"):
        export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.partial-*"))


def test_a_bad_model_name_is_refused_before_anything_is_written(tmp_path, dataset):
    with pytest.raises(ExportError, match="model_name 'My_Model': use lowercase letters"):
        export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"), model_name="My_Model")


@pytest.fixture(scope="module")
def keras_model():
    require("tensorflow")
    import keras

    inputs = keras.Input((30,), name="features")
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Normalization(mean=0.0, variance=1e4)(inputs))
    return keras.Model(inputs, keras.layers.Dense(2, name="scores")(hidden))


@pytest.mark.parametrize("fmt", ["savedmodel", "keras"])
def test_tensorflow_models_to_triton_and_tf_serving(tmp_path, dataset, keras_model, fmt):
    import tensorflow as tf

    spec = save_model(keras_model, str(tmp_path / "m"), format=fmt)
    report = export_model(str(tmp_path / "m"), dataset, str(tmp_path / "out"), model_name="cancer")
    assert [(e.target, e.format) for e in report.exports] == [("triton", "savedmodel"), ("tfserving", "savedmodel")]
    out = tmp_path / "out"
    x, _ = load_split(dataset, "test")
    expected = predictor_for(spec)(x)
    for folder in (out / "triton/cancer/1/model.savedmodel", out / "tfserving/cancer/1"):
        serve = tf.saved_model.load(str(folder)).signatures["serving_default"]
        got = next(iter(serve(**{next(iter(serve.structured_input_signature[1])): tf.constant(x)}).values()))
        np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)
    assert not (out / "tfserving/cancer/1/model.json").exists(), "only the SavedModel goes to TF Serving"
    config = (out / "triton/cancer/config.pbtxt").read_text()
    assert 'platform: "tensorflow_savedmodel"' in config
    ((name, dtype, dims),) = triton_tensors(config, "input")
    assert (name, dtype, dims) == ("features", "TYPE_FP32", "30")

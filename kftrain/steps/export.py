"""Model export: the serving layout a model server loads, verified against the trained model.

PyTorch models become TorchScript (``<name>/1/model.pt``) and ONNX (``<name>-onnx/1/model.onnx``),
each with a Triton ``config.pbtxt`` (KServe's Triton runtime and Triton itself load this layout).
TensorFlow models are copied as a SavedModel (``<name>/1/saved_model.pb`` + ``variables/``), the
layout TF Serving and KServe's TensorFlow runtime load.
Every exported file is reloaded and must reproduce the trained model's predictions on the
evaluation split before the artifact is published.
"""

from __future__ import annotations

import io
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kftrain import storage
from kftrain.data.dataset import load_split
from kftrain.errors import KftrainError
from kftrain.models import describe_model, load_predictor

log = logging.getLogger(__name__)

TORCHSCRIPT = "torchscript"
ONNX = "onnx"
SAVEDMODEL = "savedmodel"
DEFAULT_FORMATS = {"pytorch": (TORCHSCRIPT, ONNX), "tensorflow": (SAVEDMODEL,)}
TOLERANCE = 1e-4


class ExportError(KftrainError):
    """An export could not be produced or did not reproduce the model's predictions."""


@dataclass
class ExportedModel:
    format: str
    path: str
    max_abs_diff: float
    same_predictions: bool


@dataclass
class ExportReport:
    model_name: str
    framework: str
    exports: list[ExportedModel] = field(default_factory=list)

    def to_metadata(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "framework": self.framework,
            "formats": [e.format for e in self.exports],
            "paths": {e.format: e.path for e in self.exports},
            "max_abs_diff": {e.format: e.max_abs_diff for e in self.exports},
        }


def triton_config(
    name: str,
    platform: str,
    num_features: int,
    num_classes: int,
    input_name: str = "input",
    output_name: str = "logits",
) -> str:
    return (
        f'name: "{name}"\n'
        f'platform: "{platform}"\n'
        "max_batch_size: 256\n"
        f'input [ {{ name: "{input_name}" data_type: TYPE_FP32 dims: [ {num_features} ] }} ]\n'
        f'output [ {{ name: "{output_name}" data_type: TYPE_FP32 dims: [ {num_classes} ] }} ]\n'
    )


def export_model(
    model_uri: str,
    dataset_uri: str,
    output_uri: str,
    *,
    model_name: str = "digits",
    formats: tuple[str, ...] | None = None,
    verify_split: str = "test",
) -> ExportReport:
    info = describe_model(model_uri).info
    framework = str(info.get("framework"))
    wanted = formats or DEFAULT_FORMATS.get(framework, ())
    if not wanted:
        raise ExportError(f"{model_uri}: no export formats for framework {framework!r}")
    x, _ = load_split(dataset_uri, verify_split)
    predict, _ = load_predictor(model_uri)
    expected = np.asarray(predict(x))
    report = ExportReport(model_name=model_name, framework=framework)
    with storage.ArtifactWriter(output_uri) as writer:
        for fmt in wanted:
            exporter = _EXPORTERS.get((framework, fmt))
            if exporter is None:
                raise ExportError(f"format {fmt!r} is not available for {framework} models")
            rel, got = exporter(model_uri, info, model_name, writer, x)
            diff = float(np.max(np.abs(got - expected))) if len(x) else 0.0
            same = bool(np.array_equal(got.argmax(axis=1), expected.argmax(axis=1)))
            if diff > TOLERANCE or not same:
                raise ExportError(
                    f"{fmt} export does not reproduce the model: max |diff| {diff:.2e}, same predictions: {same}"
                )
            report.exports.append(ExportedModel(fmt, rel, diff, same))
            log.info("exported %s to %s (max |diff| %.2e)", fmt, storage.join(output_uri, rel), diff)
        writer.metadata = report.to_metadata()
        writer.write_json("export.json", report.to_metadata())
    return report


def _torch_model(model_uri: str) -> Any:
    from kftrain.models.pytorch import load_model  # PyTorch only when a PyTorch model is exported

    model, _ = load_model(model_uri)
    return model


def _export_torchscript(
    model_uri: str, info: dict[str, Any], name: str, writer: storage.ArtifactWriter, x: np.ndarray
) -> tuple[str, np.ndarray]:
    import torch

    model = _torch_model(model_uri)
    scripted = torch.jit.script(model)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    rel = f"{name}/1/model.pt"
    writer.write_bytes(rel, buf.getvalue())
    cfg = info["config"]
    writer.write_bytes(
        f"{name}/config.pbtxt",
        triton_config(
            name, "pytorch_libtorch", cfg["num_features"], cfg["num_classes"], "input__0", "output__0"
        ).encode(),
    )
    reloaded = torch.jit.load(io.BytesIO(storage.read_bytes(writer.path_for(rel))))
    reloaded.eval()
    with torch.no_grad():
        return rel, reloaded(torch.from_numpy(x)).numpy()


def _export_onnx(
    model_uri: str, info: dict[str, Any], name: str, writer: storage.ArtifactWriter, x: np.ndarray
) -> tuple[str, np.ndarray]:
    import onnx
    import torch

    model = _torch_model(model_uri)
    cfg = info["config"]
    buf = io.BytesIO()
    torch.onnx.export(  # the TorchScript-based exporter: the dynamo one needs onnxscript
        model,
        (torch.zeros(1, cfg["num_features"]),),
        buf,  # type: ignore[arg-type]  # a file object works; the stub says path
        dynamo=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
    )
    onnx.checker.check_model(onnx.load_from_string(buf.getvalue()))
    onnx_name = f"{name}-onnx"
    rel = f"{onnx_name}/1/model.onnx"
    writer.write_bytes(rel, buf.getvalue())
    writer.write_bytes(
        f"{onnx_name}/config.pbtxt",
        triton_config(onnx_name, "onnxruntime_onnx", cfg["num_features"], cfg["num_classes"]).encode(),
    )
    import onnxruntime

    session = onnxruntime.InferenceSession(storage.read_bytes(writer.path_for(rel)), providers=["CPUExecutionProvider"])
    return rel, np.asarray(session.run(["logits"], {"input": x.astype(np.float32)})[0])


def _export_savedmodel(
    model_uri: str, info: dict[str, Any], name: str, writer: storage.ArtifactWriter, x: np.ndarray
) -> tuple[str, np.ndarray]:
    """Copy the SavedModel to ``<name>/1/`` (TF Serving / KServe layout), reload it, predict ``x``."""
    from kftrain.models import tensorflow as tf_models  # TensorFlow only when a TF model is exported

    version_dir = f"{name}/1"
    with tf_models.local_copy(model_uri) as src:
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            rel = path.relative_to(src).as_posix()
            if rel in tf_models.NOT_SAVEDMODEL:
                continue
            with writer.open(f"{version_dir}/{rel}") as handle, open(path, "rb") as f:
                shutil.copyfileobj(f, handle, storage.CHUNK)
    with tf_models.local_copy(writer.path_for(version_dir)) as exported:
        predict, fn = tf_models.signature_predictor(exported)
        tf_models.check_signature(fn, int(info.get("num_features") or x.shape[1]))
        got = predict(x)
    return f"{version_dir}/saved_model.pb", got


# (framework, format) -> exporter: writes the format with the writer, returns its path and its predictions on x.
Exporter = Callable[[str, dict[str, Any], str, storage.ArtifactWriter, np.ndarray], tuple[str, np.ndarray]]
_EXPORTERS: dict[tuple[str, str], Exporter] = {
    ("pytorch", TORCHSCRIPT): _export_torchscript,
    ("pytorch", ONNX): _export_onnx,
    ("tensorflow", SAVEDMODEL): _export_savedmodel,
}

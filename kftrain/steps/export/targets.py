"""Writing a model into a serving layout, and loading what was written back with the runtime that will serve it.

Each writer puts one target's files into the export (through the artifact writer, so a failure leaves nothing
published) and returns a :class:`Written`: where the files are and a ``predict`` that runs the written files
with that target's runtime (libtorch for TorchScript, ONNX Runtime, TensorFlow for a SavedModel), raw outputs
included, for the comparison with the trained model and for Triton's tensor shapes.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.extras import requires

with requires("data", "export"):
    import numpy as np

from kftrain import storage
from kftrain.errors import ExportError
from kftrain.models import ModelSpec
from kftrain.models.detect import SIDE_FILES
from kftrain.models.folder import ModelFolder
from kftrain.models.predictors import (
    first_output,
    input_dtype,
    load_keras,
    model_bytes,
    onnx_model,
    savedmodel_predictor,
)
from kftrain.models.spec import KERAS, KFTRAIN_MLP, ONNX, SAVEDMODEL, TORCHSCRIPT

RawPredict = Callable[[np.ndarray], np.ndarray]


@dataclass
class Written:
    """One target's files in the export, and how to run them."""

    target: str
    format: str  # of the written model: torchscript, onnx or savedmodel
    model_dir: str  # the model's folder in the export (Triton's model folder, or TF Serving's)
    path: str  # the model file (or SavedModel folder) in the export
    platform: str  # Triton's platform; "" for TF Serving
    input_name: str
    output_name: str
    input_dtype: Any
    predict: RawPredict


def _torch_module(spec: ModelSpec) -> Any:
    """The model as a TorchScript module: loaded as it is, or this release's MLP scripted."""
    with requires("torch", "exporting a PyTorch model"):
        import torch

    if spec.format == KFTRAIN_MLP:
        from kftrain.models.pytorch import load_model

        module, _ = load_model(spec.uri)
        return torch.jit.script(module)
    module = torch.jit.load(io.BytesIO(model_bytes(spec)), map_location="cpu")
    module.eval()
    return module


def _torch_predict(module: Any, dtype: Any) -> RawPredict:
    with requires("torch", "exporting a PyTorch model"):
        import torch

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = first_output(module(torch.from_numpy(x.astype(dtype, copy=False))), "TorchScript")
        return np.asarray(out.numpy())

    return predict


def _write_model(
    spec: ModelSpec, writer: storage.ArtifactWriter, rel: str, fmt: str, convert: Callable[[], bytes]
) -> None:
    """Writes ``rel``: the model's own bytes if already ``fmt`` (checked against its marker), else ``convert()``."""
    writer.write_bytes(rel, model_bytes(spec) if spec.format == fmt else convert())


def write_torchscript(spec: ModelSpec, writer: storage.ArtifactWriter, model_dir: str, num_features: int) -> Written:
    """TorchScript as Triton's libtorch backend loads it: ``<model_dir>/1/model.pt``, tensors ``input__0``..."""
    with requires("torch", "exporting a PyTorch model"):
        import torch

    rel = f"{model_dir}/1/model.pt"

    def convert() -> bytes:
        buf = io.BytesIO()
        torch.jit.save(_torch_module(spec), buf)
        return buf.getvalue()

    _write_model(spec, writer, rel, TORCHSCRIPT, convert)
    reloaded = torch.jit.load(io.BytesIO(storage.read_bytes(writer.path_for(rel))), map_location="cpu")
    reloaded.eval()
    dtype = input_dtype(spec)
    return Written(
        "triton",
        TORCHSCRIPT,
        model_dir,
        rel,
        "pytorch_libtorch",
        "input__0",
        "output__0",
        dtype,
        _torch_predict(reloaded, dtype),
    )


def write_onnx(spec: ModelSpec, writer: storage.ArtifactWriter, model_dir: str, num_features: int) -> Written:
    """ONNX as Triton's ONNX Runtime backend loads it: ``<model_dir>/1/model.onnx``; a PyTorch model is converted."""
    with requires("onnx", "the ONNX export"):
        import onnx

    rel = f"{model_dir}/1/model.onnx"

    def convert() -> bytes:
        with requires("torch", "converting a PyTorch model to ONNX"):
            import torch

        dtype = input_dtype(spec)
        example = torch.zeros(1, num_features, dtype=torch.from_numpy(np.zeros(1, dtype)).dtype)
        buf = io.BytesIO()
        try:
            torch.onnx.export(  # the TorchScript-based exporter: the dynamo one needs onnxscript
                _torch_module(spec),
                (example,),
                buf,  # type: ignore[arg-type]  # a file object works; the stub says path
                dynamo=False,
                input_names=["input"],
                output_names=["output"],
                dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            )
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ExportError(f"{spec.location}: the model could not be converted to ONNX ({first})") from exc
        onnx.checker.check_model(onnx.load_from_string(buf.getvalue()))
        return buf.getvalue()

    _write_model(spec, writer, rel, ONNX, convert)
    path = writer.path_for(rel)
    loaded = onnx_model(storage.read_bytes(path), path)
    return Written(
        "triton",
        ONNX,
        model_dir,
        rel,
        "onnxruntime_onnx",
        loaded.input_name,
        loaded.output_name,
        loaded.input_dtype,
        loaded.predict,
    )


def savedmodel_files(spec: ModelSpec, folder: Path) -> Path:
    """A local folder holding only the model's SavedModel: downloaded, or converted from a Keras file."""
    if spec.format == KERAS:
        suffix = os.path.splitext(spec.path)[1] or ".keras"
        local = folder / f"model{suffix}"
        local.write_bytes(model_bytes(spec))
        model = load_keras(local)
        out = folder / "savedmodel"
        if type(model).__module__.startswith("keras.src") or hasattr(model, "export"):
            model.export(str(out), format="tf_saved_model", verbose=False)
        else:
            model.save(str(out), save_format="tf", include_optimizer=False)
        return out
    out = folder / "savedmodel"
    with ModelFolder(spec.uri).local_copy(spec.path) as src:  # checked against the model's marker
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            rel = path.relative_to(src).as_posix()
            if spec.path == "" and (rel in SIDE_FILES or rel.startswith(".")):
                continue  # the model folder's own files beside the SavedModel
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / rel)
    return out


def write_savedmodel(
    spec: ModelSpec, writer: storage.ArtifactWriter, model_dir: str, target: str, local: Path
) -> Written:
    """The SavedModel in ``local`` as Triton (``model.savedmodel``) or TF Serving (the version folder) loads it."""
    rel = f"{model_dir}/1/model.savedmodel" if target == "triton" else f"{model_dir}/1"
    writer.add(str(local), rel)
    signature = str(spec.info.get("signature") or "serving_default")
    output = spec.outputs[0].name if spec.outputs and spec.format == SAVEDMODEL else ""
    predict = savedmodel_predictor(ModelFolder(writer.path_for(rel)), "", signature, output)
    names = predict.tensor_names  # type: ignore[attr-defined]
    platform = "tensorflow_savedmodel" if target == "triton" else ""
    return Written(target, SAVEDMODEL, model_dir, rel, platform, names[0], names[1], names[2], predict)


def temporary_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="kftrain-export-")

"""``save_model``: a trained model, of whichever framework, written as the model contract describes, in one call.

For training code that wants the help; code that does not import kftrain writes the same files itself
(``kftrain/models/README.md``). PyTorch modules become TorchScript (scripted, or traced on
``example_input``) or ONNX; ONNX models are written as they are; Keras models (Keras 3 or ``tf_keras``) become a
SavedModel (or a ``.keras`` file); other ``tf.Module`` objects are saved with their signatures. Everything,
``model.json`` and the training curves (``metrics.jsonl``) included, is published atomically through
:class:`kftrain.storage.ArtifactWriter`.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kftrain import storage
from kftrain.extras import requires

with requires("data", "saving a model"):
    import numpy as np

from kftrain.models.detect import describe_model
from kftrain.models.spec import (
    CLASSIFICATION,
    KERAS,
    LOGITS,
    METRICS_FILE,
    MODEL_INFO,
    ONNX,
    SAVEDMODEL,
    TORCHSCRIPT,
    ModelError,
    ModelSpec,
    TensorSpec,
    describing_fields,
)

ONNX_ELEMENT_TYPES = {1: "float32", 11: "float64", 10: "float16", 7: "int64", 6: "int32"}


def save_model(
    model: Any,
    uri: str,
    *,
    example_input: Any = None,
    task: str = CLASSIFICATION,
    classes: Sequence[Any] | None = None,
    output_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    scores: str = LOGITS,
    format: str | None = None,
    input_name: str = "input",
    history: Iterable[Mapping[str, Any]] = (),
    extra: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Publish ``model`` at ``uri`` with its ``model.json`` (and ``metrics.jsonl`` from ``history``).

    ``example_input`` (a batch, numpy or tensor) lets a PyTorch module be traced when it cannot be scripted,
    is needed for ONNX, and records the input's shape. ``task``, ``classes`` (the label of each output column),
    ``output_names`` (regression), ``feature_names`` and ``scores`` (``logits`` or ``probabilities``) are what
    evaluation and export read. ``format`` picks ``onnx`` for a PyTorch module or ``keras`` for a Keras model
    (default: TorchScript, SavedModel). ``history`` rows (``{"epoch": 3, "loss": 0.4, ...}``) become the training
    curves of the evaluation report. Returns the saved model as evaluation will see it.
    """
    rows = [dict(r) for r in history]
    with tempfile.TemporaryDirectory(prefix="kftrain-save-") as tmp:
        fmt, path, inputs, outputs = _write_framework_files(model, Path(tmp), format, example_input, input_name)
        info = describing_fields(
            fmt=fmt,
            path=path,
            task=task,
            classes=list(classes) if classes is not None else None,
            output_names=list(output_names) if output_names is not None else None,
            scores=scores,
            inputs=inputs,
            outputs=outputs,
            feature_names=list(feature_names) if feature_names else None,
        )
        info.update(extra or {})
        with storage.ArtifactWriter(uri, metadata={"framework": info["framework"], "format": fmt}) as writer:
            writer.add(tmp)
            writer.write_json(MODEL_INFO, info)
            if rows:
                writer.write_bytes(METRICS_FILE, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return describe_model(uri)


def _write_framework_files(
    model: Any, folder: Path, fmt: str | None, example: Any, input_name: str
) -> tuple[str, str, list[TensorSpec], list[TensorSpec]]:
    """Write ``model`` into ``folder``: its format, its path in the folder, its input and output tensors."""
    kind = _kind_of(model)
    allowed = {"torch": (TORCHSCRIPT, ONNX), "onnx": (ONNX,), "keras": (SAVEDMODEL, KERAS), "tf": (SAVEDMODEL,)}
    if fmt is not None and fmt not in allowed[kind]:
        raise ModelError(f"format {fmt!r} is not available for a {kind} model (choose from {allowed[kind]})")
    if kind == "torch":
        return _torch(model, folder, fmt or TORCHSCRIPT, example, input_name)
    if kind == "onnx":
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        return ONNX, "model.onnx", _onnx_tensors(model.graph.input, model), _onnx_tensors(model.graph.output, model)
    if kind == "keras":
        return _keras(model, folder, fmt or SAVEDMODEL)
    with requires("tf", "saving a TensorFlow model"):
        import tensorflow as tf

    tf.saved_model.save(model, str(folder))
    return SAVEDMODEL, "", [], []


def _kind_of(model: Any) -> str:
    """Which framework made ``model``, without importing one that is not already loaded."""
    root = type(model).__module__.split(".")[0]
    if root == "torch":
        return "torch"
    if root == "onnx":
        return "onnx"
    if root in ("keras", "tf_keras") or any(
        c.__module__.split(".")[0] in ("keras", "tf_keras") for c in type(model).__mro__
    ):
        return "keras"
    if root == "tensorflow" or any(c.__module__.split(".")[0] == "tensorflow" for c in type(model).__mro__):
        return "tf"
    if any(c.__module__.split(".")[0] == "torch" for c in type(model).__mro__):
        return "torch"  # a user's nn.Module subclass, defined in their own module
    raise ModelError(
        f"cannot save a {type(model).__module__}.{type(model).__qualname__}: save_model takes a torch.nn.Module, "
        "an onnx.ModelProto, a Keras model or a tf.Module"
    )


def _torch(
    model: Any, folder: Path, fmt: str, example: Any, input_name: str
) -> tuple[str, str, list[TensorSpec], list[TensorSpec]]:
    with requires("torch", "saving a PyTorch model"):
        import torch

    batch = None
    if example is not None:
        batch = example if torch.is_tensor(example) else torch.as_tensor(np.asarray(example))
    was_training = model.training
    model.eval()  # dropout and batch norm as they serve; the caller's module is put back as it was
    try:
        out = None
        if batch is not None:
            with torch.no_grad():
                out = model(batch)
        inputs = [TensorSpec(input_name, _torch_dtype(batch), (-1, *batch.shape[1:]))] if batch is not None else []
        outputs = [TensorSpec("output", "float32", (-1, *out.shape[1:]))] if torch.is_tensor(out) else []
        if fmt == ONNX:
            if batch is None:
                raise ModelError("format 'onnx' needs example_input (a batch of inputs) to export the graph")
            buf = io.BytesIO()
            torch.onnx.export(  # the TorchScript-based exporter: the dynamo one needs onnxscript
                model,
                (batch,),
                buf,  # type: ignore[arg-type]  # a file object works; the stub says path
                dynamo=False,
                input_names=[input_name],
                output_names=["output"],
                dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}},
            )
            (folder / "model.onnx").write_bytes(buf.getvalue())
            return ONNX, "model.onnx", inputs, outputs
        scripted = model if isinstance(model, torch.jit.ScriptModule) else _script_or_trace(model, batch)
        torch.jit.save(scripted, str(folder / "model.pt"))
        return TORCHSCRIPT, "model.pt", inputs, outputs
    finally:
        model.train(was_training)


def _script_or_trace(model: Any, batch: Any) -> Any:
    with requires("torch", "saving a PyTorch model"):
        import torch

    try:
        return torch.jit.script(model)
    except Exception as exc:  # scripting fails on Python the TorchScript compiler does not support
        if batch is None:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"torch.jit.script failed ({first}); pass example_input=<a batch> so the model can be traced"
            ) from None
        return torch.jit.trace(model, batch)


def _torch_dtype(batch: Any) -> str:
    return str(batch.dtype).removeprefix("torch.")


def _onnx_tensors(values: Any, model: Any) -> list[TensorSpec]:
    initializers = {i.name for i in model.graph.initializer}
    out = []
    for v in values:
        if v.name in initializers:
            continue
        t = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        out.append(TensorSpec(v.name, ONNX_ELEMENT_TYPES.get(t.elem_type, "float32"), dims))
    return out


def _keras(model: Any, folder: Path, fmt: str) -> tuple[str, str, list[TensorSpec], list[TensorSpec]]:
    inputs = [_keras_tensor(t, f"input_{i}") for i, t in enumerate(getattr(model, "inputs", None) or [])]
    outputs = [_keras_tensor(t, f"output_{i}") for i, t in enumerate(getattr(model, "outputs", None) or [])]
    keras3 = type(model).__module__.split(".")[0] == "keras" or any(
        c.__module__.startswith("keras.src") for c in type(model).__mro__
    )
    if fmt == KERAS:
        model.save(str(folder / "model.keras"))
        return KERAS, "model.keras", inputs, outputs
    if keras3:
        model.export(str(folder), format="tf_saved_model", verbose=False)
    else:
        model.save(str(folder), save_format="tf", include_optimizer=False)
    return SAVEDMODEL, "", inputs, []  # SavedModel outputs are named by its signature, read when it is loaded


def _keras_tensor(t: Any, default: str) -> TensorSpec:
    shape = tuple(-1 if s is None else int(s) for s in t.shape)
    dtype = getattr(t.dtype, "name", None) or str(t.dtype)
    name = str(getattr(t, "name", "") or default).split(":")[0]
    return TensorSpec(name, dtype if dtype in ("float32", "float64", "float16", "int32", "int64") else "float32", shape)

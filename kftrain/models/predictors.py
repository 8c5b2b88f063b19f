"""A model of any accepted format as ``predict(x) -> scores`` on numpy arrays, for evaluation and export.

``x`` is a float32 batch ``[rows, features]``; it is cast to the type the model's input declares. The result
is a 2-D float array ``[rows, outputs]`` (a 1-D output becomes one column); :func:`model_scores` is that rule,
refusing anything else. Each format imports only its own framework, when it is loaded.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kftrain.extras import requires

with requires("data", "loading a model"):
    import numpy as np

from kftrain.models.folder import ModelFolder
from kftrain.models.spec import KERAS, KFTRAIN_MLP, ONNX, SAVEDMODEL, TORCHSCRIPT, ModelError, ModelSpec

Predictor = Callable[[np.ndarray], np.ndarray]
SIGNATURE = "serving_default"
ONNX_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}


def predictor_for(spec: ModelSpec) -> Predictor:
    """``predict(x) -> scores`` for the model ``spec`` describes."""
    loaders: dict[str, Callable[[ModelSpec], Predictor]] = {
        TORCHSCRIPT: _torchscript,
        KFTRAIN_MLP: _kftrain_mlp,
        ONNX: _onnx,
        SAVEDMODEL: _savedmodel,
        KERAS: _keras,
    }
    predict = loaders[spec.format](spec)
    name = getattr(predict, "output_name", "") or (spec.outputs[0].name if spec.outputs else "")

    def checked(x: np.ndarray) -> np.ndarray:
        return model_scores(predict(np.ascontiguousarray(x, dtype=np.float32)), len(x), spec.location, name)

    return checked


def model_scores(value: Any, rows: int, where: str, name: str = "") -> np.ndarray:
    """A model's output for ``rows`` rows as the contract reads it, or a :class:`ModelError` naming the output
    (``name``), its shape and dtype: floating-point scores (logits or probabilities) of shape ``[rows, k]``, or
    ``[rows]`` (one column: a regressor's prediction, a two-class model's positive score). Anything else, such as
    integer class ids, is not a score: read as one it would be scored as a logit."""
    out = np.asarray(value)
    shape = list(out.shape)
    what = f"{where}: the model's output{f' {name!r}' if name else ''} ({out.dtype}, shape {shape} for {rows} rows)"
    if out.dtype.kind != "f":
        hint = " class ids or labels are not scores;" if out.dtype.kind in "biu" else ""
        raise ModelError(
            f"{what} is not floating-point scores:{hint} return the logits or probabilities, one column per class "
            "(or one value per row for a regressor)"
        )
    if out.ndim == 1:
        out = out[:, None]
    if out.ndim != 2 or out.shape[0] != rows:
        raise ModelError(f"{what}: expected [rows, k] (or [rows])")
    return out


def input_dtype(spec: ModelSpec, default: Any = np.float32) -> Any:
    """The element type of the model's first input, as its ``model.json`` declares it."""
    return np.dtype(spec.inputs[0].dtype) if spec.inputs else default


def first_output(value: Any, where: str) -> Any:
    """A model's output, or the first of a tuple/list/dict of outputs."""
    if isinstance(value, dict):
        value = next(iter(value.values()))
    elif isinstance(value, tuple | list):
        if not value:
            raise ModelError(f"{where}: the model returned no output")
        value = value[0]
    return value


def model_bytes(spec: ModelSpec) -> bytes:
    """The model's file, read through its folder (checked against the folder's marker when it has one)."""
    return ModelFolder(spec.uri).read_bytes(spec.path)


def _torchscript(spec: ModelSpec) -> Predictor:
    with requires("torch", "loading a TorchScript model"):
        import torch

    model = torch.jit.load(io.BytesIO(model_bytes(spec)), map_location="cpu")
    model.eval()
    dtype = input_dtype(spec)

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = first_output(model(torch.from_numpy(x.astype(dtype, copy=False))), spec.location)
        return np.asarray((out.float() if out.is_floating_point() else out).numpy())  # bfloat16 has no numpy type

    return predict


def _kftrain_mlp(spec: ModelSpec) -> Predictor:
    with requires("torch", "loading a PyTorch model"):
        import torch

        from kftrain.models import pytorch

    model, _ = pytorch.load_model(spec.uri)

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()

    return predict


def _onnx(spec: ModelSpec) -> Predictor:
    model = onnx_model(model_bytes(spec), spec.location)
    model.predict.output_name = model.output_name  # type: ignore[attr-defined]  # for the contract's errors
    return model.predict


@dataclass(frozen=True)
class OnnxModel:
    """An ONNX model loaded for scoring: its one input's name and element type, its first output's name, and
    ``predict``."""

    input_name: str
    output_name: str
    input_dtype: Any
    predict: Predictor


def onnx_model(model: bytes, where: str) -> OnnxModel:
    """Load ``model`` (an ONNX file's bytes; ``where`` names it in errors) for scoring: one input, the first output."""
    session = onnx_session(model, where)
    feeds = session.get_inputs()
    if len(feeds) != 1:
        names = ", ".join(i.name for i in feeds)
        raise ModelError(f"{where}: the model takes {len(feeds)} inputs ({names}); the contract is one")
    name, dtype = feeds[0].name, ONNX_TYPES.get(feeds[0].type, np.float32)
    output = session.get_outputs()[0].name

    def predict(x: np.ndarray) -> np.ndarray:
        # The output in the model's own precision, as TorchScript's and TensorFlow's are: a float32 model's scores
        # stay float32 (a float64 copy of them made the softmax after it four times slower).
        return np.asarray(session.run([output], {name: x.astype(dtype, copy=False)})[0])

    return OnnxModel(name, output, dtype, predict)


def onnx_session(model: bytes, where: str = "the ONNX model") -> Any:
    """An ``onnxruntime`` session for ``model`` on the CPU whose idle threads sleep instead of spinning.

    The evaluation step reads the next batch on a thread of its own while the model scores this one. onnxruntime's
    intra-op threads spin between operators by default (``session.intra_op.allow_spinning`` "1",
    microsoft/onnxruntime docs/performance/tune-performance/threading.md), which on a small machine takes the
    reader's core: on 2 cores the split was scored at 0.8 of a bare session loop with spinning and at its speed
    without (bench P12). A batch is thousands of rows, so the wake-up spinning saves is noise beside it."""
    with requires("onnx", "loading an ONNX model"):
        import onnxruntime

    refuse_external_data(model, where)
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's Fail, InvalidGraph...: one line naming the file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelError(f"{where}: onnxruntime cannot load the model ({first})") from None


def refuse_external_data(model: bytes, where: str) -> None:
    """Refuse a model that keeps a tensor's data in a file of its own (ONNX external data), naming the tensor and the
    file: a model is read as one file's bytes, and onnxruntime resolves such a location against the process's working
    directory (an escape from the model folder, up to an absolute path; onnx/onnx@v1.17.0:docs/ExternalData.md)."""
    with requires("onnx", "loading an ONNX model"):
        import onnx

    try:
        proto = onnx.load_model_from_string(model)
    except Exception as exc:
        raise ModelError(f"{where}: not an ONNX model ({str(exc).strip()[:200] or type(exc).__name__})") from None
    for tensor in _tensors(proto.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        escapes = os.path.isabs(location) or os.path.normpath(location).startswith("..")
        raise ModelError(
            f"{where}: tensor {tensor.name!r} keeps its data in {location!r}"
            + (", outside the model folder" if escapes else "")
            + ": kftrain reads an ONNX model as one file; save it with its weights inside (onnx.save_model with "
            "save_as_external_data=False)"
        )


def _tensors(graph: Any) -> Iterator[Any]:
    """Every tensor of ``graph``: its initializers and the tensors of its nodes' attributes, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def _savedmodel(spec: ModelSpec) -> Predictor:
    folder = ModelFolder(spec.uri)
    return savedmodel_predictor(folder, spec.path, spec.info.get("signature") or SIGNATURE, _output_name(spec))


def savedmodel_predictor(folder: ModelFolder, rel: str = "", signature: str = SIGNATURE, output: str = "") -> Predictor:
    """``predict`` through the serving signature (one input) of the SavedModel at ``rel`` in ``folder`` ("": the
    folder itself); ``output`` names the output to use."""
    uri = folder.uri_of(rel) if rel else folder.uri
    with requires("tf", "loading a TensorFlow model"):
        from kftrain.models import tensorflow as _  # TF_USE_LEGACY_KERAS before TensorFlow loads
    with requires("tf", "loading a TensorFlow model"):  # a block of its own: import sorting keeps it second
        import tensorflow as tf

    with folder.local_copy(rel) as path:
        loaded = tf.saved_model.load(os.fspath(path))  # the variables are read into memory while loading
    if signature not in loaded.signatures:
        have = ", ".join(loaded.signatures) or "none"
        raise ModelError(f"{uri}: no {signature!r} signature in the SavedModel (it has: {have})")
    fn = loaded.signatures[signature]
    _, kwargs = fn.structured_input_signature
    if len(kwargs) != 1:
        raise ModelError(f"{uri}: signature {signature!r} takes {len(kwargs)} inputs ({', '.join(kwargs)}); one")
    ((input_name, input_spec),) = kwargs.items()
    outputs = list(fn.structured_outputs)
    if output and output not in outputs:
        raise ModelError(f"{uri}: signature {signature!r} has no output {output!r} (it has: {', '.join(outputs)})")
    output = output or outputs[0]
    dtype = input_spec.dtype.as_numpy_dtype

    def predict(x: np.ndarray) -> np.ndarray:
        return np.asarray(fn(**{input_name: tf.constant(x.astype(dtype, copy=False))})[output].numpy())

    predict.loaded = loaded  # type: ignore[attr-defined]  # keep the restored object alive with the function
    predict.tensor_names = (input_name, output, dtype)  # type: ignore[attr-defined]  # for Triton's config
    predict.output_name = output  # type: ignore[attr-defined]  # for the contract's errors
    return predict


def _output_name(spec: ModelSpec) -> str:
    """The signature output ``model.json`` names (this release's TF programs write ``output_name``)."""
    return spec.outputs[0].name if spec.outputs else str(spec.info.get("output_name", ""))


def keras_version(path: str | os.PathLike[str]) -> str:
    """The Keras version that wrote a ``.keras`` file ("" for an HDF5 file, which Keras 2 wrote)."""
    if not zipfile.is_zipfile(path):
        return ""
    with zipfile.ZipFile(path) as archive:
        try:
            return str(json.loads(archive.read("metadata.json")).get("keras_version", ""))
        except KeyError:
            return ""


def load_keras(path: str | os.PathLike[str]) -> Any:
    """A ``.keras``/``.h5`` model with the Keras that wrote it: Keras 3, or Keras 2 (``tf_keras``)."""
    with requires("tf", "loading a Keras model"):
        from kftrain.models import tensorflow as _  # noqa: F401  # TF_USE_LEGACY_KERAS before TensorFlow loads

        if keras_version(path).startswith("3"):
            import keras

            return keras.saving.load_model(os.fspath(path), compile=False)
        import tf_keras

    return tf_keras.models.load_model(os.fspath(path), compile=False)


def _keras(spec: ModelSpec) -> Predictor:
    suffix = os.path.splitext(spec.path)[1] or ".keras"
    with tempfile.TemporaryDirectory(prefix="kftrain-keras-") as tmp:
        local = os.path.join(tmp, f"model{suffix}")
        with open(local, "wb") as dst:
            dst.write(model_bytes(spec))
        model = load_keras(local)
    dtype = input_dtype(spec)

    def predict(x: np.ndarray) -> np.ndarray:
        out = first_output(model(x.astype(dtype, copy=False), training=False), spec.location)
        return np.asarray(out)

    return predict

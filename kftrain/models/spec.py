"""What evaluation and export know about a model folder: its format, its tensors and its task.

The model contract (``kftrain/models/README.md``) lets a training program describe its model in an optional
``model.json`` next to the model's files. :class:`ModelSpec` is that description, checked: each field is
validated here, so a typo in a user's ``model.json`` fails with the field's name instead of a crash later.
Standard library only: the launch step reads model folders without importing a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import KftrainError

MODEL_INFO = "model.json"
METRICS_FILE = "metrics.jsonl"

TORCHSCRIPT = "torchscript"
ONNX = "onnx"
SAVEDMODEL = "savedmodel"
KERAS = "keras"
KFTRAIN_MLP = "kftrain-mlp"  # this release's PyTorch programs: a state dict plus the MLP's shape in model.json
FRAMEWORK_OF = {
    TORCHSCRIPT: "pytorch",
    KFTRAIN_MLP: "pytorch",
    ONNX: "onnx",
    SAVEDMODEL: "tensorflow",
    KERAS: "tensorflow",
}
FORMATS = tuple(FRAMEWORK_OF)

CLASSIFICATION = "classification"
REGRESSION = "regression"
TASKS = (CLASSIFICATION, REGRESSION)
LOGITS = "logits"
PROBABILITIES = "probabilities"
SCORES = (LOGITS, PROBABILITIES)
DTYPES = ("float32", "float64", "float16", "int64", "int32")


class ModelError(KftrainError):
    """A model folder cannot be read: the message names the file and says what to write instead."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output tensor: its name, element type and shape (-1 for a size that varies, e.g. the batch)."""

    name: str
    dtype: str = "float32"
    shape: tuple[int, ...] = (-1, -1)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, where: str, d: Any) -> TensorSpec:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
            raise ModelError(f"{where}: expected {{'name': str, 'dtype': str, 'shape': [int, ...]}}, got {d!r}")
        dtype = d.get("dtype", "float32")
        if dtype not in DTYPES:
            raise ModelError(f"{where}.dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
        shape = d.get("shape", [-1, -1])
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= -1 for s in shape):
            raise ModelError(f"{where}.shape: expected a list of sizes (-1 for any), got {shape!r}")
        return cls(d["name"], dtype, tuple(shape))


@dataclass
class ModelSpec:
    """A model folder as evaluation and export see it: where the model is, its format, and what it predicts."""

    uri: str  # the model folder
    format: str
    path: str = ""  # the model's file or SavedModel folder, relative to ``uri`` ("" for the folder itself)
    task: str = ""  # classification or regression; "" when unsaid (the dataset says)
    classes: list[Any] | None = None  # the label of each output column of a classifier
    output_names: list[str] | None = None  # the name of each output column of a regressor
    scores: str = LOGITS  # what a classifier outputs: logits or probabilities
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    feature_names: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # the whole model.json ({} when there is none)

    @property
    def framework(self) -> str:
        return FRAMEWORK_OF[self.format]

    @property
    def location(self) -> str:
        """The URI of the model's file (or SavedModel folder)."""
        from kftrain import storage

        return storage.join(self.uri, *self.path.split("/")) if self.path else self.uri

    def to_metadata(self) -> dict[str, Any]:
        """What the launch step and the export record about the model in KFP's metadata."""
        out: dict[str, Any] = {"framework": self.framework, "format": self.format, "file": self.path or "."}
        if self.task:
            out["task"] = self.task
        if self.inputs:
            out["inputs"] = [t.to_json() for t in self.inputs]
        return out


def spec_from_info(uri: str, fmt: str, path: str, info: dict[str, Any]) -> ModelSpec:
    """The :class:`ModelSpec` that ``model.json`` (``info``) describes, every field checked."""
    task = info.get("task", "")
    if task not in ("", *TASKS):
        raise ModelError(f"{MODEL_INFO}: task must be one of {', '.join(TASKS)}, got {task!r}")
    scores = info.get("scores", LOGITS)
    if scores not in SCORES:
        raise ModelError(f"{MODEL_INFO}: scores must be one of {', '.join(SCORES)}, got {scores!r}")
    classes = info.get("classes")
    if classes is not None and (not isinstance(classes, list) or not classes):
        raise ModelError(f"{MODEL_INFO}: classes must be a non-empty list (the label of each output), got {classes!r}")
    output_names = info.get("output_names")
    if output_names is not None and not (
        isinstance(output_names, list) and all(isinstance(n, str) for n in output_names)
    ):
        raise ModelError(f"{MODEL_INFO}: output_names must be a list of strings, got {output_names!r}")
    features = info.get("feature_names") or []
    if not isinstance(features, list) or not all(isinstance(n, str) for n in features):
        raise ModelError(f"{MODEL_INFO}: feature_names must be a list of strings, got {features!r}")
    tensors: dict[str, list[TensorSpec]] = {}
    for key in ("inputs", "outputs"):
        value = info.get(key) or []
        if not isinstance(value, list):
            raise ModelError(f"{MODEL_INFO}: {key} must be a list, got {value!r}")
        tensors[key] = [TensorSpec.from_json(f"{MODEL_INFO}: {key}[{i}]", t) for i, t in enumerate(value)]
    return ModelSpec(
        uri=uri,
        format=fmt,
        path=path,
        task=task,
        classes=classes,
        output_names=output_names,
        scores=scores,
        inputs=tensors["inputs"],
        outputs=tensors["outputs"],
        feature_names=list(features),
        info=info,
    )


def describing_fields(
    *,
    fmt: str,
    path: str,
    task: str,
    classes: list[Any] | None,
    output_names: list[str] | None,
    scores: str,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    feature_names: list[str] | None,
) -> dict[str, Any]:
    """The ``model.json`` keys of the contract, for the writers in this package (unset ones left out)."""
    if task not in TASKS:
        raise ModelError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if scores not in SCORES:
        raise ModelError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
    out: dict[str, Any] = {
        "format": fmt,
        "framework": FRAMEWORK_OF[fmt],
        "task": task,
        "inputs": [t.to_json() for t in inputs],
        "outputs": [t.to_json() for t in outputs],
    }
    if path:
        out["file"] = path
    if task == CLASSIFICATION:
        out["scores"] = scores
        if classes is not None:
            out["classes"] = list(classes)
    elif output_names is not None:
        out["output_names"] = list(output_names)
    if feature_names:
        out["feature_names"] = list(feature_names)
    return out

"""TensorFlow models: built with Keras 2 (``tf_keras``), stored as a SavedModel by URI.

A model folder holds a SavedModel at its root and ``model.json``, published atomically by
:class:`kftrain.storage.ArtifactWriter`; its ``serving_default`` signature takes ``input`` (float32
``[None, num_features]``) and returns ``logits`` (float32 ``[None, num_classes]``), as TF Serving and KServe's
TensorFlow runtime load it. TensorFlow is imported lazily, with ``TF_USE_LEGACY_KERAS=1`` set first: Keras 3's
``model.fit`` fails under MultiWorkerMirroredStrategy, Keras 2 works.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before any `import tensorflow` in this process (imports below)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO/WARNING lines drown the logs

import shutil
from pathlib import Path
from typing import Any

from kftrain import storage
from kftrain.data.dataset import DatasetInfo
from kftrain.models.spec import CLASSIFICATION, LOGITS, MODEL_INFO, SAVEDMODEL, TensorSpec, describing_fields

FRAMEWORK = "tensorflow"
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
SIGNATURE = "serving_default"


def build_model(num_features: int, num_classes: int, hidden: tuple[int, ...] = (128, 64), dropout: float = 0.1) -> Any:
    """An MLP returning logits; its input is named ``input`` so the serving signature's key is too."""
    import tf_keras as keras

    inputs = keras.Input(shape=(num_features,), dtype="float32", name=INPUT_NAME)
    x = inputs
    for width in hidden:
        x = keras.layers.Dense(width, activation="relu")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(num_classes, name=OUTPUT_NAME)(x)
    return keras.Model(inputs, outputs, name="mlp")


def save_savedmodel(model: Any, path: str | os.PathLike[str]) -> None:
    """A Keras model as a SavedModel (with its ``serving_default`` signature), without the optimizer."""
    model.save(os.fspath(path), save_format="tf", include_optimizer=False)


def model_json(
    dataset: DatasetInfo, hidden: tuple[int, ...], strategy: str, metrics: dict[str, float]
) -> dict[str, Any]:
    """What a trainer records in ``model.json``: the contract's keys, and how it was trained."""
    described = describing_fields(
        fmt=SAVEDMODEL,
        path="",
        task=CLASSIFICATION,
        classes=dataset.classes,
        output_names=None,
        scores=LOGITS,
        inputs=[TensorSpec(INPUT_NAME, "float32", (-1, dataset.num_features))],
        outputs=[TensorSpec(OUTPUT_NAME, "float32", (-1, dataset.num_classes))],
        feature_names=dataset.feature_names,
    )
    return {
        **described,
        "num_features": dataset.num_features,
        "num_classes": dataset.num_classes,
        "hidden": list(hidden),
        "input_name": INPUT_NAME,
        "output_name": OUTPUT_NAME,
        "signature": SIGNATURE,
        "strategy": strategy,
        "keras": "tf_keras",
        "metrics": {k: (None if v != v else v) for k, v in metrics.items()},  # NaN -> null: JSON has no NaN
    }


def publish_model(uri: str, saved_dir: str | os.PathLike[str], info: dict[str, Any]) -> None:
    """Publish the SavedModel in local folder ``saved_dir`` plus ``model.json`` as one complete artifact."""
    root = Path(saved_dir)
    with storage.ArtifactWriter(uri, metadata={"framework": FRAMEWORK, "format": "savedmodel"}) as writer:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            with writer.open(rel) as handle, open(path, "rb") as src:
                shutil.copyfileobj(src, handle, storage.CHUNK)
        writer.write_json(MODEL_INFO, {"framework": FRAMEWORK, "format": SAVEDMODEL, **info})

"""Trained models by URI: the model contract, what a model folder holds, and how each format is loaded.

A model folder holds a model in one of the accepted formats (TorchScript, ONNX, a TensorFlow SavedModel, a
Keras file, or this release's own PyTorch MLP), an optional ``model.json`` describing it and an optional
``metrics.jsonl`` of training curves: the contract is documented once, in ``kftrain/models/README.md``.

- :mod:`~kftrain.models.spec`: :class:`ModelSpec`, the checked content of ``model.json``;
- :mod:`~kftrain.models.detect`: :func:`describe_model`, which model a folder holds (from its content);
- :mod:`~kftrain.models.predictors`: :func:`predictor_for`, any format as ``predict(x) -> scores``;
- :mod:`~kftrain.models.save`: :func:`save_model`, for training code that wants the help;
- :mod:`~kftrain.models.history`: the training curves;
- :mod:`~kftrain.models.pytorch`, :mod:`~kftrain.models.tensorflow`: what this release's trainers build and write.

Frameworks are imported only when a model of theirs is loaded or saved.
"""

from __future__ import annotations

from typing import Any

from kftrain.models.detect import describe_model
from kftrain.models.predictors import Predictor, predictor_for
from kftrain.models.save import save_model
from kftrain.models.spec import (
    CLASSIFICATION,
    FORMATS,
    METRICS_FILE,
    MODEL_INFO,
    REGRESSION,
    ModelError,
    ModelSpec,
    TensorSpec,
)


def load_predictor(model_uri: str) -> tuple[Predictor, dict[str, Any]]:
    """The model at ``model_uri`` as ``predict(x) -> scores``, and its ``model.json`` ({} when it has none)."""
    spec = describe_model(model_uri)
    return predictor_for(spec), spec.info


__all__ = [
    "CLASSIFICATION",
    "FORMATS",
    "METRICS_FILE",
    "MODEL_INFO",
    "REGRESSION",
    "ModelError",
    "ModelSpec",
    "Predictor",
    "TensorSpec",
    "describe_model",
    "load_predictor",
    "predictor_for",
    "save_model",
]

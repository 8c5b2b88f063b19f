"""Trained models by URI: the model contract, what a model folder holds, and how each format is loaded.

A model folder holds a model in one of the accepted formats (TorchScript, ONNX, a TensorFlow SavedModel, a
Keras file, or this release's own PyTorch MLP), an optional ``model.json`` describing it and an optional
``metrics.jsonl`` of training curves: the contract is documented once, in ``kftrain/models/README.md``.

- :mod:`~kftrain.models.folder`: :class:`ModelFolder`, a folder's files read through its marker when it has one;
- :mod:`~kftrain.models.spec`: :class:`ModelSpec`, the checked content of ``model.json``;
- :mod:`~kftrain.models.detect`: :func:`describe_model`, which model a folder holds (from its content);
- :mod:`~kftrain.models.predictors`: :func:`predictor_for`, any format as ``predict(x) -> scores``;
- :mod:`~kftrain.models.save`: :func:`save_model`, for training code that wants the help;
- :mod:`~kftrain.models.history`: the training curves;
- :mod:`~kftrain.models.pytorch`, :mod:`~kftrain.models.tensorflow`: what this release's programs build and write.

Frameworks are imported only when a model of theirs is loaded or saved, and numpy only when a model is loaded
or saved: the launch step (whose image has neither) describes a model through this package, so
:func:`predictor_for`, :data:`Predictor` and :func:`save_model` are imported when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kftrain.models.detect import describe_model
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

if TYPE_CHECKING:
    from kftrain.models.predictors import Predictor, predictor_for
    from kftrain.models.save import save_model

_LAZY = {"Predictor": "predictors", "predictor_for": "predictors", "save_model": "save"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"kftrain.models.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_predictor(model_uri: str) -> tuple[Predictor, dict[str, Any]]:
    """The model at ``model_uri`` as ``predict(x) -> scores``, and its ``model.json`` ({} when it has none)."""
    from kftrain.models.predictors import predictor_for

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

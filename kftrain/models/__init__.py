"""Trained models by URI: the model contract (``kftrain/models/README.md``), what a model folder holds, and how each
format is loaded: :mod:`.folder` (a folder's files), :mod:`.spec` (``model.json``), :mod:`.detect` (which model a
folder holds), :mod:`.predictors` (any format as ``predict(x) -> scores``), :mod:`.save`, :mod:`.history` (training
curves), :mod:`.pytorch` and :mod:`.tensorflow` (what this release's programs build), :mod:`.kserve` (the manifests
KServe serves an export with).

Frameworks and numpy are imported only when a model is loaded or saved (the launch image has neither and describes
models through this package): :func:`predictor_for`, :data:`Predictor` and :func:`save_model` load on first use.
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

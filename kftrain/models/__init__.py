"""Trained models by URI: how each framework saves and loads one, and the dispatch between them.

A model folder holds the framework's files next to ``model.json`` (:data:`MODEL_INFO`), whose
``framework`` key says which module of this package reads it: :mod:`kftrain.models.pytorch` or
:mod:`kftrain.models.tensorflow`. Trainers write models through those modules; evaluation and export
load them through :func:`load_predictor`, which imports only the framework the model uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.extras import requires

if TYPE_CHECKING:
    import numpy as np  # only named here: the launch step reads model.json without numpy

MODEL_INFO = "model.json"
Predictor = Callable[["np.ndarray"], "np.ndarray"]


def model_info(model_uri: str) -> dict[str, Any]:
    """The ``model.json`` of the complete model at ``model_uri``."""
    info: dict[str, Any] = storage.ArtifactReader(model_uri).read_json(MODEL_INFO)
    return info


def load_predictor(model_uri: str) -> tuple[Predictor, dict[str, Any]]:
    """The model at ``model_uri`` as ``predict(x) -> scores``, and its ``model.json``."""
    info = model_info(model_uri)
    framework = info.get("framework")
    if framework == "pytorch":
        with requires("torch", "loading a PyTorch model"):
            from kftrain.models import pytorch

            return pytorch.predictor(model_uri), info
    if framework == "tensorflow":
        with requires("tf", "loading a TensorFlow model"):
            from kftrain.models import tensorflow

            return tensorflow.predictor(model_uri), info
    raise KftrainError(f"{model_uri}: unknown model framework {framework!r} in {MODEL_INFO}")

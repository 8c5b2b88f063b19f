"""Trained models by URI: load one as a plain ``predict(x) -> scores`` function, whatever framework made it.

Each trainer writes ``model.json`` with a ``framework`` key next to its weights; evaluation and export
dispatch on it, so they never import a framework the model does not use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kftrain import storage
from kftrain.errors import KftrainError

MODEL_INFO = "model.json"
Predictor = Callable[[np.ndarray], np.ndarray]


def model_info(model_uri: str) -> dict[str, Any]:
    storage.require_complete(model_uri)
    info: dict[str, Any] = storage.read_json(storage.join(model_uri, MODEL_INFO))
    return info


def load_predictor(model_uri: str) -> tuple[Predictor, dict[str, Any]]:
    info = model_info(model_uri)
    framework = info.get("framework")
    if framework == "pytorch":
        import torch

        from kftrain.trainers.torch_ddp import load_model

        model, _ = load_model(model_uri)

        def predict(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()

        return predict, info
    if framework == "tensorflow":
        from kftrain.models.tensorflow import load_tf_predictor

        return load_tf_predictor(model_uri), info
    raise KftrainError(f"{model_uri}: unknown model framework {framework!r} in {MODEL_INFO}")

"""PyTorch models: the MLP classifier the PyTorch programs train, and its folder by URI.

A model folder holds ``model.pt`` (the ``state_dict``) and ``model.json`` (the contract's keys with format
``kftrain-mlp``, plus ``"architecture": "mlp", "config": {...}, "metrics": {...}``), published atomically by
:class:`kftrain.storage.ArtifactWriter`; the model is rebuilt from ``config``. Evaluation and export read it
like any other format (:mod:`kftrain.models.predictors`).
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from kftrain import storage
from kftrain.models.folder import ModelFolder
from kftrain.models.spec import CLASSIFICATION, KFTRAIN_MLP, LOGITS, MODEL_INFO, TensorSpec, describing_fields

FRAMEWORK = "pytorch"
MODEL_FILE = "model.pt"


@dataclass
class MLPConfig:
    """The MLP's shape, stored as ``config`` in ``model.json`` to rebuild the model when it is loaded."""

    num_features: int
    num_classes: int
    hidden: tuple[int, ...] = (128, 64)
    dropout: float = 0.1

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> MLPConfig:
        hidden = d.get("hidden", (128, 64))
        assert isinstance(hidden, list | tuple)
        return cls(
            num_features=int(str(d["num_features"])),
            num_classes=int(str(d["num_classes"])),
            hidden=tuple(int(h) for h in hidden),
            dropout=float(str(d.get("dropout", 0.1))),
        )


class MLP(nn.Module):
    """Linear + ReLU + dropout per hidden layer, then a linear layer to the class logits."""

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = config.num_features
        for h in config.hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(config.dropout)]
            width = h
        layers.append(nn.Linear(width, config.num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def write_model(
    uri: str, model: nn.Module, config: MLPConfig, classes: list[Any], features: list[str], metrics: dict[str, float]
) -> None:
    """Publish ``model``'s weights and ``model.json`` at ``uri`` as one complete artifact."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    described = describing_fields(
        fmt=KFTRAIN_MLP,
        path=MODEL_FILE,
        task=CLASSIFICATION,
        classes=classes,
        output_names=None,
        scores=LOGITS,
        inputs=[TensorSpec("input", "float32", (-1, config.num_features))],
        outputs=[TensorSpec("logits", "float32", (-1, config.num_classes))],
        feature_names=features,
    )
    with storage.ArtifactWriter(uri, metadata={"framework": FRAMEWORK, "format": KFTRAIN_MLP}) as w:
        w.write_bytes(MODEL_FILE, buf.getvalue())
        w.write_json(
            MODEL_INFO,
            {**described, "architecture": "mlp", "config": config.to_json(), "metrics": metrics},
        )


def load_model(uri: str) -> tuple[nn.Module, dict[str, Any]]:
    """The model at ``uri`` in eval mode, and its ``model.json``."""
    folder = ModelFolder(uri)  # one version, each file checked against its marker
    info = json.loads(folder.read_bytes(MODEL_INFO))
    model = MLP(MLPConfig.from_json(info["config"]))
    state = torch.load(io.BytesIO(folder.read_bytes(MODEL_FILE)), weights_only=True)
    model.load_state_dict(state)
    model.eval()
    return model, info

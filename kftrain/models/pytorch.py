"""The PyTorch classifier the reference trainer trains, rebuilt from its saved config."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass
class MLPConfig:
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

"""Small PyTorch models the model-contract tests save, load and break (a module of their own so that torch is
imported by the tests that use them, not when the suite is collected)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Unscriptable(Net):
    def forward(self, *inputs):  # TorchScript rejects varargs; tracing records the call as made
        return self.body(inputs[0])


def expected(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """What ``model`` outputs for ``x``, in eval mode."""
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


class Broken(nn.Module):
    def __init__(self, bad: float, outputs: int) -> None:
        super().__init__()
        self.bad, self.outputs = bad, outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x[:, : self.outputs] * 0.0
        return torch.cat([out[:1] + self.bad, out[1:]])  # the first row of every batch

"""What Triton reads: ``config.pbtxt`` (KServe's ``InferenceService`` manifest: :mod:`kftrain.models.kserve`).

The tensors in a Triton config come from the exported model itself (its input and output names, element
types and the shapes measured by running it on the test split), so the config matches what Triton loads. Every
value reaches the file through a writer that escapes it: :mod:`~kftrain.steps.export.pbtxt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.extras import requires

with requires("data", "export"):
    import numpy as np

from kftrain.errors import ExportError
from kftrain.steps.export import pbtxt
from kftrain.steps.export.pbtxt import Enum

TRITON_TYPES = {
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "float16": "TYPE_FP16",
    "int64": "TYPE_INT64",
    "int32": "TYPE_INT32",
}
MAX_BATCH_SIZE = 256


@dataclass(frozen=True)
class Tensor:
    """A tensor as Triton sees it: its name, element type, and shape without the batch dimension."""

    name: str
    dtype: str
    dims: tuple[int, ...]

    @classmethod
    def measured(cls, name: str, value: np.ndarray) -> Tensor:
        """The tensor ``value`` (a batch) is an instance of; its element type must be one Triton serves."""
        dtype = np.dtype(value.dtype).name
        if dtype not in TRITON_TYPES:
            raise ExportError(f"tensor {name!r} is {dtype}: Triton serves {', '.join(TRITON_TYPES)}")
        return cls(name, dtype, tuple(int(d) for d in value.shape[1:]))

    def message(self) -> dict[str, Any]:
        """The tensor as a Triton ``ModelInput``/``ModelOutput`` message."""
        out: dict[str, Any] = {"name": self.name, "data_type": Enum(TRITON_TYPES[self.dtype])}
        # A [batch] tensor has no dimension left once batching takes the first: Triton wants [1], reshaped.
        out["dims"] = list(self.dims) or [1]
        if not self.dims:
            out["reshape"] = {"shape": []}
        return out


def triton_config(name: str, platform: str, inputs: list[Tensor], outputs: list[Tensor]) -> str:
    """A Triton ``config.pbtxt``: batching on the first dimension, up to :data:`MAX_BATCH_SIZE` rows; every value
    (a tensor's name comes from the model) written through :func:`pbtxt.render`, escaped."""
    return pbtxt.render(
        {
            "name": name,
            "platform": platform,
            "max_batch_size": MAX_BATCH_SIZE,
            "input": [t.message() for t in inputs],
            "output": [t.message() for t in outputs],
        }
    )

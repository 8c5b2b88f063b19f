"""The training curves a program may leave in its model folder: ``metrics.jsonl``, one JSON object per line.

Each line is one point, ``{"epoch": 3, "loss": 0.41, "val_accuracy": 0.9}``: ``epoch`` or ``step`` is the
x-axis and every other number a curve. The format is the model contract's (``kftrain/models/README.md``);
the evaluation report draws it. A bad line is skipped with a warning naming it: curves are a view of the
training, never a reason to fail an evaluation.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from kftrain import storage
from kftrain.models.folder import ModelFolder
from kftrain.models.spec import METRICS_FILE

log = logging.getLogger(__name__)
X_AXES = ("epoch", "step")


def read_history(model_uri: str) -> list[dict[str, float]]:
    """The points of ``metrics.jsonl`` in the model folder ([] when there is none), numbers only."""
    where = storage.join(model_uri, METRICS_FILE)
    folder = ModelFolder(model_uri)  # through the model's marker when it has one
    if METRICS_FILE not in folder.files():
        return []
    points: list[dict[str, float]] = []
    for number, line in enumerate(folder.read_bytes(METRICS_FILE).decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            log.warning("%s:%d: not JSON (%s); line skipped", where, number, exc)
            continue
        if not isinstance(row, dict):
            log.warning("%s:%d: not a JSON object; line skipped", where, number)
            continue
        numbers = {
            str(k): float(v)
            for k, v in row.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        if numbers:
            points.append(numbers)
    return points


def x_axis(points: list[dict[str, float]]) -> str:
    """The key the curves are drawn against: ``epoch`` or ``step`` when every point has it, else the line number."""
    for key in X_AXES:
        if points and all(key in p for p in points):
            return key
    return ""

"""Pipeline parameters given as ``--param NAME=VALUE``, for ``kftrain run``, ``submit`` and ``schedule``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kftrain.errors import KftrainError


def parse_params(items: Sequence[str] | None) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; a value is JSON when it parses as JSON (``5``, ``0.1``, ``true``, ``[1]``), else text.

    A name given twice keeps its last value.
    """
    out: dict[str, Any] = {}
    for text in items or []:
        name, sep, raw = text.partition("=")
        if not sep or not name:
            raise KftrainError(f"--param {text!r}: expected NAME=VALUE")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out

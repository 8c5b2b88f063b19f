"""Pipeline parameters given as ``--params-file FILE`` and ``--param NAME=VALUE``, for ``kftrain run``, ``submit``
and ``schedule``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kftrain.errors import KftrainError


def read_params_file(path: str) -> dict[str, Any]:
    """A YAML (or JSON) mapping of parameter names to values; an error naming the file."""
    from kftrain.job.manifest.parse import PARAMETERS, read_yaml_file

    docs = read_yaml_file(path, PARAMETERS, source=f"--params-file {path}")  # bounded, as a manifest is read
    loaded = docs[0] if len(docs) == 1 else docs
    if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
        raise KftrainError(f"--params-file {path}: expected a mapping of parameter names to values")
    return dict(loaded)


def parse_params(items: Sequence[str] | None, params_file: str | None = None) -> dict[str, Any]:
    """The parameters of ``params_file`` (a YAML or JSON mapping), then ``NAME=VALUE`` pairs over them.

    A pair's value is JSON when it parses as JSON (``5``, ``0.1``, ``true``, ``[1]``), else text. A name given
    twice keeps its last value.
    """
    out: dict[str, Any] = read_params_file(params_file) if params_file else {}
    for text in items or []:
        name, sep, raw = text.partition("=")
        if not sep or not name:
            raise KftrainError(f"--param {text!r}: expected NAME=VALUE")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out

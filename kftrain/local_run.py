"""Run a pipeline on this machine with KFP's local runner.

Each step runs as a subprocess of this Python (no containers, no pip install at run time); the
launch step then runs the training job's replicas through the local backend.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.errors import KftrainError

log = logging.getLogger(__name__)

# name -> "module:function" of the pipelines this package ships.
PIPELINES = {
    "pytorch-digits": "kftrain_pipelines.training.pytorch_digits.pipeline:pytorch_digits",
}
DEFAULT_PIPELINE = "pytorch-digits"


@dataclass
class LocalRun:
    pipeline: str
    pipeline_root: Path
    seconds: float
    outputs: Any


def load_pipeline(name: str) -> Callable[..., Any]:
    target = PIPELINES.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise KftrainError(f"unknown pipeline {name!r}; known: {', '.join(sorted(PIPELINES))} (or module:function)")
    return getattr(importlib.import_module(module_name), attr)


def run_locally(name: str, params: Mapping[str, Any], pipeline_root: str | Path) -> LocalRun:
    from kfp import local

    root = Path(pipeline_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    pipeline = load_pipeline(name)
    # The local runner warns about images without "python" in the name; ours run in this venv.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    started = time.monotonic()
    outputs = pipeline(**params)
    return LocalRun(pipeline=name, pipeline_root=root, seconds=time.monotonic() - started, outputs=outputs)

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

DEFAULT_PIPELINE = "pytorch-digits"


def shipped_pipelines() -> dict[str, str]:
    """Pipelines of ``kftrain_pipelines``: folder ``<category>/<name>/pipeline.py`` -> ``name`` with dashes."""
    import kftrain_pipelines

    found: dict[str, str] = {}
    for base in kftrain_pipelines.__path__:
        for source in sorted(Path(base).glob("*/*/pipeline.py")):
            category, name = source.parent.parent.name, source.parent.name
            found[name.replace("_", "-")] = f"kftrain_pipelines.{category}.{name}.pipeline"
    return found


@dataclass
class LocalRun:
    pipeline: str
    pipeline_root: Path
    seconds: float
    outputs: Any


def load_pipeline(name: str) -> Callable[..., Any]:
    """A shipped pipeline by name, or any ``module:function``."""
    from kfp.dsl import graph_component

    shipped = shipped_pipelines()
    if name in shipped:
        module = importlib.import_module(shipped[name])
        found = [
            obj
            for obj in vars(module).values()
            if isinstance(obj, graph_component.GraphComponent)
            and getattr(obj.pipeline_func, "__module__", None) == module.__name__
        ]
        if len(found) == 1:
            return found[0]
        raise KftrainError(f"{module.__name__}: expected exactly one pipeline, found {len(found)}")
    module_name, sep, attr = name.partition(":")
    if not sep:
        raise KftrainError(f"unknown pipeline {name!r}; known: {', '.join(sorted(shipped))} (or module:function)")
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

"""The shipped pipelines and components: the one place in ``kftrain`` that imports them.

``pipelines/`` and ``components/`` install as the packages ``kftrain_pipelines`` and
``kftrain_components``; those import ``kftrain``, so the runtime package must never import them back.
The commands that need them (``kftrain run``, ``submit``, ``schedule``, ``compile``) come through here:
the pipelines by name (folder ``<category>/<name>/pipeline.py`` is the pipeline ``<name>``, dashed),
and the one pipeline or component each module defines.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kftrain.errors import KftrainError

PIPELINES_PACKAGE = "kftrain_pipelines"
COMPONENTS_PACKAGE = "kftrain_components"


def shipped_pipelines() -> dict[str, str]:
    """Pipelines of ``kftrain_pipelines``: folder ``<category>/<name>/pipeline.py`` -> ``name`` with dashes."""
    import kftrain_pipelines

    found: dict[str, str] = {}
    for base in kftrain_pipelines.__path__:
        for source in sorted(Path(base).glob("*/*/pipeline.py")):
            category, name = source.parent.parent.name, source.parent.name
            found[name.replace("_", "-")] = f"{kftrain_pipelines.__name__}.{category}.{name}.pipeline"
    return found


def defined_object(module_name: str, *, pipeline: bool, where: object = None) -> Any:
    """The one pipeline (``pipeline``) or component defined, not imported, in the module ``module_name`` (beside
    its :func:`variants`). ``where`` names the module in the error (default: the module's name).
    """
    others = [id(obj) for obj in variants(module_name).values()] if not pipeline else []
    found = [obj for obj in _defined(module_name, pipeline=pipeline).values() if id(obj) not in others]
    if len(found) != 1:
        kind = "pipeline" if pipeline else "component"
        raise KftrainError(f"{where or module_name}: expected exactly one {kind}, found {len(found)}")
    return found[0]


def variants(module_name: str) -> dict[str, Any]:
    """Further components a component module defines, by suffix: ``<folder>_<suffix>`` (a component of another
    shape for some backends, e.g. ``pytorchjob_launch_task_config``); each compiles to ``component.<suffix>.yaml``."""
    folder = module_name.rsplit(".", 2)[-2]
    return {
        name.removeprefix(f"{folder}_"): obj
        for name, obj in _defined(module_name, pipeline=False).items()
        if name.startswith(f"{folder}_")
    }


def _defined(module_name: str, *, pipeline: bool) -> dict[str, Any]:
    from kfp.dsl import base_component, graph_component

    module = importlib.import_module(module_name)
    wanted = graph_component.GraphComponent if pipeline else base_component.BaseComponent
    return {
        name: obj
        for name, obj in vars(module).items()
        if isinstance(obj, wanted)
        and (pipeline or not isinstance(obj, graph_component.GraphComponent))
        and _defining_module(obj) == module_name
    }


def _defining_module(obj: object) -> str | None:
    func = getattr(obj, "pipeline_func", None) or getattr(obj, "python_func", None)
    return getattr(func, "__module__", None)


def load_pipeline(name: str) -> Callable[..., Any]:
    """A shipped pipeline by name, or any ``module:function``."""
    shipped = shipped_pipelines()
    if name in shipped:
        return defined_object(shipped[name], pipeline=True)
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise KftrainError(f"unknown pipeline {name!r}; known: {', '.join(sorted(shipped))} (or module:function)")
    return user_pipeline(module_name, attr)


def user_pipeline(module_name: str, attr: str) -> Callable[..., Any]:
    """The pipeline ``attr`` of the module ``module_name``, found as ``python -m`` finds a module: in the current
    folder first, then on the Python path (the ``kftrain`` command's own path starts with its script's folder)."""
    from kfp.dsl import graph_component

    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise KftrainError(
                f"{module_name}:{attr}: no module named {module_name!r} in the current folder ({here}) or on the "
                "Python path; run kftrain from the folder of your pipeline's module"
            ) from None
        raise KftrainError(f"{module_name}:{attr}: importing {module_name} failed: {exc}") from None
    found = getattr(module, attr, None)
    if found is None:
        raise KftrainError(f"{module_name}:{attr}: the module {module_name} ({module.__file__}) has no {attr!r}")
    if not isinstance(found, graph_component.GraphComponent):
        raise KftrainError(f"{module_name}:{attr}: not a pipeline (a function decorated with @dsl.pipeline)")
    return found

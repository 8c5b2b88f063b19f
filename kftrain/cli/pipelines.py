"""The shipped pipelines and components: the one place in ``kftrain`` that imports them.

``pipelines/`` and ``components/`` install as the packages ``kftrain_pipelines`` and
``kftrain_components``; those import ``kftrain``, so the runtime package must never import them back.
The commands that need them (``kftrain run``, ``submit``, ``schedule``, ``compile``) come through here:
the pipelines by name (folder ``<category>/<name>/pipeline.py`` is the pipeline ``<name>``, dashed),
and the one pipeline or component each module defines.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
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


@contextlib.contextmanager
def step_pull_secrets_on_every_step() -> Iterator[None]:
    """Within the block, every step of every pipeline defined gets the step images' pull secrets
    (``KFTRAIN_IMAGE_PULL_SECRETS`` at compile time), as each step of a shipped pipeline does: the same
    :func:`kftrain_components.images.use_step_pull_secrets`, which leaves a step that names its own. A user's pipeline
    module is imported within it to compile, submit or schedule it.

    KFP builds a pipeline's spec when ``@dsl.pipeline`` decorates the function: it runs the body inside a pipeline
    context, then compiles the tasks the body made (kubeflow/pipelines@2.17.0:sdk/python/kfp/dsl/graph_component.py,
    ``GraphComponent.__init__``). The context's exit is the moment every task exists and none is compiled yet, so the
    secrets are given there; a nested pipeline's steps get them when it is defined, as its own pipeline.
    """
    from kfp.dsl import pipeline_context

    from kftrain_components.images import STEP_IMAGE_PULL_SECRETS, use_step_pull_secrets

    if not STEP_IMAGE_PULL_SECRETS:
        yield
        return
    plain = pipeline_context.Pipeline.__exit__

    def exit_giving_secrets(self: pipeline_context.Pipeline, *exc_info: object) -> None:
        for task in self.tasks.values():
            use_step_pull_secrets(task)
        plain(self, *exc_info)

    pipeline_context.Pipeline.__exit__ = exit_giving_secrets
    try:
        yield
    finally:
        pipeline_context.Pipeline.__exit__ = plain


def compile_settings() -> tuple[str, tuple[str, ...]]:
    """(the registry of kftrain's step images, the steps' pull secrets), as this process compiles pipelines: read
    from ``KFTRAIN_IMAGE_REGISTRY`` and ``KFTRAIN_IMAGE_PULL_SECRETS`` when kftrain's components were imported."""
    from kftrain_components.images import LAUNCH_IMAGE, STEP_IMAGE_PULL_SECRETS

    return LAUNCH_IMAGE.rsplit("/", 1)[0], STEP_IMAGE_PULL_SECRETS

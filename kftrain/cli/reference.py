"""A pipeline reference, as ``kftrain run``, ``compile``, ``submit`` and ``schedule create`` take it: a shipped
pipeline's name (``pytorch-digits``), a compiled pipeline file (``pipeline.yaml``), or ``MODULE:FUNCTION`` (the
pipeline ``FUNCTION`` of a module of the user's, ``my_pipeline:my_pipeline`` or ``path/to/file.py:my_pipeline``).

:func:`parse_reference` tells which one a text is before anything is imported; :func:`load_pipeline` gives the
pipeline to run or compile, and :func:`check_params` holds the ``--param`` names given against what the pipeline takes
for every command the same way.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.cli.pipelines import defined_object, shipped_pipelines, step_pull_secrets_on_every_step
from kftrain.cli.user_module import import_user_module
from kftrain.errors import KftrainError

# What a compiled pipeline file may be: KFP's YAML (or JSON) pipeline spec, or an archive the server reads.
COMPILED_SUFFIXES = (".yaml", ".yml", ".json", ".zip", ".gz", ".tgz")
# The positional argument's help, the same in every command that takes one (compile: no compiled file).
_FUNCTION_HELP = (
    "MODULE:FUNCTION, the @dsl.pipeline FUNCTION of your module (my_pipeline:my_pipeline from its folder, "
    "pkg.module:FUNCTION, or path/to/file.py:FUNCTION)"
)
HELP = (
    "the pipeline: a shipped pipeline's name (e.g. pytorch-digits), a compiled pipeline file (pipeline.yaml), "
    f"or {_FUNCTION_HELP}"
)
COMPILE_HELP = f"the pipeline to compile: a shipped pipeline's name (e.g. pytorch-digits) or {_FUNCTION_HELP}"


class Kind(enum.Enum):
    SHIPPED = "shipped"
    FILE = "file"
    FUNCTION = "function"


@dataclass(frozen=True)
class PipelineRef:
    given: str  # as the user wrote it: every error starts with it
    kind: Kind
    path: Path | None = None  # FILE: the compiled file
    module: str = ""  # SHIPPED: the module defining it; FUNCTION: the module's name or .py file
    function: str = ""  # FUNCTION: the pipeline's name in the module


def parse_reference(given: str) -> PipelineRef:
    """Which pipeline ``given`` names; an error listing the three forms when it names none. Nothing is imported."""
    module, sep, function = given.rpartition(":")
    if sep and module and function.isidentifier():
        return PipelineRef(given, Kind.FUNCTION, module=module, function=function)
    path = Path(given)
    if path.suffix == ".py":
        raise KftrainError(f"pipeline {given!r} is a Python file: name its pipeline function, {given}:FUNCTION")
    if path.suffix in COMPILED_SUFFIXES or path.is_file():
        if not path.is_file():
            raise KftrainError(f"pipeline file {path} does not exist")
        return PipelineRef(given, Kind.FILE, path=path)
    shipped = shipped_pipelines()
    if given in shipped:
        return PipelineRef(given, Kind.SHIPPED, module=shipped[given])
    if path.is_dir():
        raise KftrainError(f"pipeline {given!r} is a folder: name a compiled pipeline file or MODULE:FUNCTION")
    if sep:
        raise KftrainError(f"pipeline {given!r}: after the ':' comes the pipeline's function name (MODULE:FUNCTION)")
    hint = f" ({given}:FUNCTION names a pipeline of {given}.py)" if Path(f"{given}.py").is_file() else ""
    raise KftrainError(
        f"unknown pipeline {given!r}: not a file, not MODULE:FUNCTION, and not one of {', '.join(sorted(shipped))}"
        + hint
    )


def load_pipeline(ref: PipelineRef, *, for_cluster: bool = False) -> Any:
    """The pipeline ``ref`` names, ready to call (run locally) or compile: a shipped or user's ``@dsl.pipeline``
    function, or a compiled file loaded as a component. ``for_cluster``: a user's module is imported with the
    compile-time settings of the shipped pipelines (:func:`kftrain.cli.pipelines.step_pull_secrets_on_every_step`;
    the images' registry is read when kftrain's components are imported), as this process's first import of it."""
    from kfp.dsl import graph_component

    if ref.kind is Kind.SHIPPED:
        return defined_object(ref.module, pipeline=True)
    if ref.kind is Kind.FILE:
        return _load_file(ref)
    with step_pull_secrets_on_every_step() if for_cluster else contextlib.nullcontext():
        module = import_user_module(ref.module, ref.given)
    found = getattr(module, ref.function, None)
    if found is None:
        defined = sorted(name for name, obj in vars(module).items() if isinstance(obj, graph_component.GraphComponent))
        listing = f"; its pipelines: {', '.join(defined)}" if defined else "; it defines no @dsl.pipeline"
        raise KftrainError(f"{ref.given}: the module {ref.module} ({module.__file__}) has no {ref.function!r}{listing}")
    if not isinstance(found, graph_component.GraphComponent):
        raise KftrainError(f"{ref.given}: not a pipeline (a function decorated with @dsl.pipeline)")
    return found


def _load_file(ref: PipelineRef) -> Any:
    assert ref.path is not None
    if ref.path.suffix not in (".yaml", ".yml", ".json"):
        raise KftrainError(f"{ref.given}: an archive is for the server only; run or compile its YAML")
    from kfp import components

    from kftrain.job.manifest.parse import PIPELINE, parse_yaml_documents, read_text_file

    # Read as every YAML file a user gives is (bounded, aliases expanded within limits), then given to KFP's loader.
    text = read_text_file(ref.path, PIPELINE)
    parse_yaml_documents(text, str(ref.path), PIPELINE)
    try:
        component = components.load_component_from_text(text)
    except Exception as exc:  # KFP's loader raises whatever the YAML makes it
        raise KftrainError(f"{ref.given}: not a compiled KFP pipeline ({type(exc).__name__}: {exc})") from None
    if not component.component_spec.implementation.graph:
        raise KftrainError(f"{ref.given}: a compiled component, not a pipeline")
    return component


def pipeline_name(pipeline: Any) -> str:
    """The pipeline's name (its ``pipelineInfo.name``, the default name on a server and of its compiled file)."""
    return str(pipeline.component_spec.name)


def parameters(pipeline: Any) -> tuple[frozenset[str], frozenset[str]]:
    """(every parameter, the required ones: no default) of a loaded pipeline."""
    inputs = pipeline.component_spec.inputs or {}
    return frozenset(inputs), frozenset(name for name, spec in inputs.items() if not spec.optional)


def check_params(
    name: str, declared: frozenset[str] | None, required: frozenset[str], params: Mapping[str, Any]
) -> None:
    """Refuse a parameter the pipeline does not take and a required one not given (``declared`` None: unknown, no
    check), before anything runs or is sent."""
    if declared is None:
        return
    unknown = sorted(set(params) - declared)
    if unknown:
        raise KftrainError(
            f"{name}: unknown parameter(s) {', '.join(unknown)}; "
            f"the pipeline takes {', '.join(sorted(declared)) or 'none'}"
        )
    missing = sorted(required - set(params))
    if missing:
        given = " ".join(f"--param {m}=VALUE" for m in missing)
        raise KftrainError(f"{name}: missing parameter(s) {', '.join(missing)}, which have no default: pass {given}")


def load_for_compile(ref: PipelineRef) -> Any:
    """The pipeline ``ref`` names, loaded to compile for a cluster (:func:`load_pipeline`); a compiled file is
    refused: there is nothing to compile."""
    if ref.kind is Kind.FILE:
        raise KftrainError(f"{ref.given}: already a compiled pipeline file")
    return load_pipeline(ref, for_cluster=True)


def check_output(output: Path) -> None:
    """``output`` can take a compiled pipeline: a ``.yaml`` file in a folder that exists."""
    if output.suffix not in (".yaml", ".yml"):
        raise KftrainError(f"-o {output}: a compiled pipeline is a .yaml file")
    if not output.parent.is_dir():
        raise KftrainError(f"-o {output}: no folder {output.parent}")


def compile_to(pipeline: Any, output: Path) -> None:
    """Write ``pipeline`` compiled to the YAML file ``output``."""
    check_output(output)
    from kfp import compiler

    compiler.Compiler().compile(pipeline, str(output))

"""A component's inputs, declared once: a dataclass whose fields (:func:`component_input`) are the inputs, from which
the component's function is written (:func:`parameters`, :func:`function_source`) and into which its step parses
the values it is given (the dataclass itself). The launch components' table is :mod:`kftrain.launch.inputs`;
evaluation's, export's and prep's are this package's modules, kept apart from the steps' code so that building a
pipeline imports none of the step's dependencies (numpy, pyarrow...).
"""

from __future__ import annotations

import copy
import dataclasses
import textwrap
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # an input without a default: the pipeline must give it


def component_input(default: Any, doc: str, *, group: str = "", annotation: str = "") -> Any:
    """A field of an input table: its default (``REQUIRED``: none), the description the component shows, the group
    it is listed in (for a table listed in two places of a signature) and, for an artifact, its KFP annotation as
    written in the signature (``dsl.Output[dsl.Model]``). The field's name is the input's name."""
    metadata = {"doc": doc, "group": group, "annotation": annotation}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def artifact(annotation: str, doc: str, default: Any = REQUIRED) -> Any:
    """An artifact input or output of a table (``annotation`` as KFP reads it, e.g. ``dsl.Input[dsl.Model]``)."""
    return component_input(default, doc, annotation=annotation)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a component's function: its name, annotation as written, description and default."""

    name: str
    annotation: str
    doc: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class Output:
    """One output parameter of a component (a field of the function's ``NamedTuple`` return)."""

    name: str
    type: type
    doc: str


def parameters(table: type) -> list[Parameter]:
    """The table's inputs as the component function's parameters, in the order of its fields."""
    hints = get_type_hints(table)
    rows = []
    for f in dataclasses.fields(table):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        annotation = f.metadata["annotation"] or _annotation(hints[f.name])
        rows.append(Parameter(f.name, annotation, f.metadata["doc"], default))
    return rows


def _annotation(hint: Any) -> str:
    """The annotation KFP reads for a parameter: the scalar, list or dict, or ``Optional`` of one."""
    if hint in (str, int, bool, float):
        return str(hint.__name__)
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return f"Optional[{_annotation(args[0])}]"
    if origin is dict:
        return "dict"
    if origin is list:
        return "list"
    raise TypeError(f"a component input cannot be a {hint}")


def function_source(
    name: str,
    summary: str,
    details: str,
    params: Sequence[Parameter],
    body: str,
    *,
    outputs: Sequence[Output] = (),
) -> str:
    """The source of a component's function: the signature (``NamedTuple`` of ``outputs`` when there are any), a
    docstring of ``summary``, ``details`` and each parameter's and output's description, then ``body``."""
    lines = [f"    {p.name}: {p.annotation}{'' if p.default is REQUIRED else f' = {p.default!r}'}," for p in params]
    returns = ""
    if outputs:
        fields = ", ".join(f'("{o.name}", {o.type.__name__})' for o in outputs)
        returns = f' -> NamedTuple("Outputs", [{fields}])'
    args_doc = "\n".join(f"        {p.name}: {p.doc}" for p in params)
    returns_doc = "".join(f"\n        {o.name}: {o.doc}" for o in outputs)
    body_details = f"\n\n{textwrap.indent(details.strip(), '    ')}" if details.strip() else ""
    return (
        f"def {name}(\n"
        + "\n".join(lines)
        + f"\n){returns}:\n"
        + f'    """{summary}{body_details}\n\n    Args:\n{args_doc}\n'
        + (f"\n    Returns:{returns_doc}\n" if outputs else "")
        + '    """\n'
        + textwrap.indent(body, "    ")
    )


def step_body(step: str, params: Sequence[Parameter], *, returns: bool) -> str:
    """A step component's body: one call of ``step`` (``module:function``) with every input by its own name."""
    module, function = step.split(":")
    call_args = "".join(f"    {p.name}={p.name},\n" for p in params)
    return f"from {module} import {function}\n\n{'return ' if returns else ''}{function}(\n{call_args})\n"

"""The one check of ``--param`` values against the pipeline's parameter types, for ``run``, ``submit`` and
``schedule create`` alike, before anything runs or is sent.

A type is KFP's ``parameterType`` (``NUMBER_INTEGER``, ``NUMBER_DOUBLE``, ``STRING``, ``BOOLEAN``, ``LIST``,
``STRUCT``), read from a loaded pipeline (:func:`types_of_pipeline`) or a compiled file's root inputs. A value is of
that type exactly, as KFP checks a call (kubeflow/pipelines@2.17.0:sdk/python/kfp/dsl/types/type_utils.py:384,
``check_parameter_type_compatibility``: the names must be equal), an integer fits int64 (the proto field), and no
number anywhere in it is NaN or infinite (JSON has neither). A value a step would refuse by a rule of its own
(:func:`value_rules`: the name MLflow registers the export under) is refused here too, before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kftrain.errors import KftrainError

INT64 = (-(2**63), 2**63 - 1)
ARTIFACT = "ARTIFACT"  # a root input that is an artifact: no --param gives it
_EXPECTED = {
    "NUMBER_INTEGER": "a whole number (int64)",
    "NUMBER_DOUBLE": "a finite number with a decimal point (1.0, not 1)",
    "STRING": "text (a JSON string in quotes for one that looks like a number: '\"5\"')",
    "BOOLEAN": "true or false",
    "LIST": "a JSON list",
    "STRUCT": "a JSON mapping with text keys",
}

_TYPE_NAMES = {
    int: "NUMBER_INTEGER",
    float: "NUMBER_DOUBLE",
    str: "STRING",
    bool: "BOOLEAN",
    list: "LIST",
    dict: "STRUCT",
}


def types_of_pipeline(pipeline: Any) -> dict[str, str]:
    """The parameterType of each input of a loaded pipeline (:data:`ARTIFACT` for an artifact)."""
    from kfp.dsl.types import type_utils

    out = {}
    for name, spec in (pipeline.component_spec.inputs or {}).items():
        is_param = type_utils.is_parameter_type(spec.type)
        out[name] = type_utils.get_parameter_type_name(spec.type) if is_param else ARTIFACT
    return out


def check_param_values(given: str, types: Mapping[str, str], params: Mapping[str, Any]) -> None:
    """Refuse a value that is not of its parameter's type; a parameter of an unknown type is not checked."""
    for name, value in params.items():
        kind = types.get(name)
        if kind is None:
            continue
        problem = "an artifact input, which no --param gives" if kind == ARTIFACT else _problem(kind, value)
        rule = value_rules().get(name) if kind == "STRING" and not problem else None
        if rule is not None:
            try:
                rule(value)
            except KftrainError as exc:
                problem = str(exc)
        if problem:
            raise KftrainError(f"{given}: --param {name}={_shown(value)}: {problem}")


def value_rules() -> dict[str, Callable[[str], object]]:
    """The parameters that carry a value to a rule outside the pipeline, each with that rule: ``register_model``,
    the name of an MLflow registered model (MLflow's own rule, which the export step applies only after training),
    whatever pipeline passes it."""
    from kftrain.tracking.export import check_model_name  # imported when checked: kftrain.storage

    return {"register_model": check_model_name}


def _problem(kind: str, value: Any) -> str:
    ok = {
        "NUMBER_INTEGER": type(value) is int and INT64[0] <= value <= INT64[1],
        "NUMBER_DOUBLE": type(value) is float,
        "STRING": type(value) is str,
        "BOOLEAN": type(value) is bool,
        "LIST": type(value) is list,
        "STRUCT": type(value) is dict,
    }.get(kind)
    if ok is None:
        return ""
    if not ok:
        typed = _TYPE_NAMES.get(type(value), type(value).__name__)
        if typed == kind:  # an integer past int64
            return f"{kind} is int64, from {INT64[0]} to {INT64[1]}"
        return f"Argument type {typed!r} is incompatible with the input type {kind!r}: expected {_EXPECTED[kind]}"
    bad = _not_json(value)
    return (
        f"{bad} is not a JSON value (NaN, infinities, non-text keys and other types have no JSON form)" if bad else ""
    )


def _not_json(value: Any) -> str:
    """The first part of ``value`` that JSON cannot carry, as text; empty when it all can."""
    if value is None or type(value) in (str, bool, int):
        return ""
    if type(value) is float:
        return "" if math.isfinite(value) else repr(value)
    if type(value) is list:
        return next((bad for bad in map(_not_json, value) if bad), "")
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return repr(key)
            if bad := _not_json(item):
                return bad
        return ""
    return f"{type(value).__name__} {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."

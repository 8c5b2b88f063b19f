"""Check a TrainJob manifest's shape with Kubeflow Trainer's own models (the ``kubeflow-trainer-api`` package).

The pydantic models drop fields they do not know, as the API server would prune them: a field they drop (a misspelt
``numNode``) is refused here by name, and a wrong type is named by its whole path. What Trainer merges into its
runtime's containers (the trainer's image, command, args, env, resourcesPerNode; an initializer's env) is checked
here on the TrainJob's own path by :mod:`kftrain.job.pod_checks`' rules for each value alone (after the merge an
error could only name the runtime's container); how a value agrees with the runtime's is for the merged pod.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from kftrain.errors import JobSpecError, quoted

_TOP_LEVEL_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


def check_trainjob(data: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob's ``spec``, after checking the whole manifest against its CRD's bounds and Trainer's models."""
    from kftrain.job.kinds.trainjob.bounds import check_bounds

    unknown = sorted(set(map(str, data)) - _TOP_LEVEL_KEYS)
    if unknown:
        raise JobSpecError(unknown[0], "unknown top-level field")
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise JobSpecError("spec", "missing or not a mapping")
    if not isinstance(spec.get("runtimeRef"), Mapping) or not spec["runtimeRef"].get("name"):
        raise JobSpecError("spec.runtimeRef.name", "missing: a TrainJob names the runtime it runs on")
    check_bounds(data)  # before the models copy every one of 400,000 args
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob  # (seconds to import: only when needed)

    given = {"apiVersion": data["apiVersion"], "kind": data["kind"], "spec": copy.deepcopy(dict(spec))}
    try:
        parsed = TrainerV1alpha1TrainJob.from_dict(given).to_dict()
    except _REFUSALS:
        raise _type_error(TrainerV1alpha1TrainJob, given, ()) from None
    dropped = _first_dropped(given["spec"], parsed.get("spec") or {}, "spec")
    if dropped:
        raise JobSpecError(dropped, "unknown field (not in the TrainJob API of Kubeflow Trainer v2.3.0)")
    check_merged_fields(given["spec"])
    return given["spec"]


def check_merged_fields(spec: Mapping[str, Any]) -> None:
    """What ``spec`` (typed by the models) merges into its runtime's containers, checked on its own path."""
    from kftrain.job import pod_checks as check

    trainer = spec.get("trainer") or {}
    if trainer.get("image"):
        check.image("spec.trainer.image", trainer["image"])
    for key in ("command", "args"):
        check.program(f"spec.trainer.{key}", trainer.get(key))
    envs = [("spec.trainer.env", trainer.get("env"))]
    for name in ("dataset", "model"):
        envs.append((f"spec.initializer.{name}.env", ((spec.get("initializer") or {}).get(name) or {}).get("env")))
    for path, env in envs:
        for i, var in enumerate(env or []):
            _check_env_var(f"{path}[{i}]", var)
    per_node = trainer.get("resourcesPerNode") or {}
    # Only limits and requests are merged into the node container (kubeflow/trainer@v2.3.0:
    # pkg/runtime/core/trainingruntime.go, MergeResourceRequirements of the container's limits and requests).
    merged = {section: per_node[section] for section in check.RESOURCE_SECTIONS if per_node.get(section) is not None}
    check.resource_values("spec.trainer.resourcesPerNode", merged)


def _check_env_var(path: str, var: Mapping[str, Any]) -> None:
    """One variable as the resolved pod's are checked (kftrain.job.validate); a name set twice is not refused here:
    the merge keeps the last (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/jobset/builder.go upserts the
    trainer's and the initializers' env by name, UpsertEnvVars)."""
    from kftrain.job import pod_checks as check
    from kftrain.job.model import EnvVar
    from kftrain.job.serde import from_dict

    check.env_var(path, from_dict(EnvVar, dict(var), path))
    ref = (var.get("valueFrom") or {}).get("secretKeyRef")
    if isinstance(ref, Mapping):
        check.dns1123_subdomain(f"{path}.valueFrom.secretKeyRef.name", ref.get("name") or "")
        check.secret_key(f"{path}.valueFrom.secretKeyRef.key", str(ref.get("key") or ""))


# What a model's from_dict raises on a part it refuses: pydantic's ValidationError (a ValueError), a oneOf model's
# (a quantity's) ValueError, or, on a part of the wrong shape, what the generated code raises on it (``.items()`` of a
# list).
_REFUSALS = (ValueError, TypeError, AttributeError)


def _type_error(model: Any, data: Any, path: tuple[str | int, ...]) -> JobSpecError:
    """The error of the innermost model under ``model`` that refuses its part of ``data``, named by the whole path.

    The models check a manifest from the top, each handing its nested parts to theirs (``from_dict``), and the
    error of the innermost one says where it failed only within its own part (``numNodes``, not
    ``spec.trainer.numNodes``): so the nested parts are tried here, from the top, until the one that fails alone."""
    for sub_model, steps, value in _nested_parts(model, data):
        where = (*path, *steps)
        if isinstance(sub_model, str):  # a list or a mapping of models given as something else
            return JobSpecError(_dotted(where), f"Input should be {sub_model}, got {quoted(value)}")
        try:
            sub_model.from_dict(value)
        except _REFUSALS:
            return _type_error(sub_model, value, where)
    try:
        model.from_dict(data)
    except _REFUSALS as exc:
        return _as_spec_error(exc, data, path)
    return JobSpecError(_dotted(path), "refused by the TrainJob API of Kubeflow Trainer v2.3.0")  # not reached


def _nested_parts(model: Any, data: Any) -> Iterator[tuple[Any, tuple[str | int, ...], Any]]:
    """(model, the steps to it, the value) of each part of ``data`` that ``model`` hands to a nested model, in the
    order of its fields (the order its ``from_dict`` checks them in); in place of the model, what the part should
    be ("a valid list") where it is not a list or a mapping of them as the field says."""
    from pydantic import BaseModel

    if not isinstance(data, Mapping):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = data.get(key)
        if value is None:
            continue
        for kind, sub_model in _models_in(field.annotation, BaseModel):
            if kind == "list":
                if not isinstance(value, list):
                    yield "a valid list", (key,), value
                    return
                yield from ((sub_model, (key, i), item) for i, item in enumerate(value))
            elif kind == "map":
                if not isinstance(value, Mapping):
                    yield "a valid dictionary", (key,), value
                    return
                yield from ((sub_model, (key, str(k)), item) for k, item in value.items())
            else:
                yield sub_model, (key,), value


def _models_in(annotation: Any, base: type) -> Iterator[tuple[str, Any]]:
    """("one" | "list" | "map", model) for each model a field's type holds: ``Optional[M]``, ``List[M]``,
    ``Dict[str, M]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, base):
        yield "one", annotation
    elif origin is list and args and isinstance(args[0], type) and issubclass(args[0], base):
        yield "list", args[0]
    elif origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], base):
        yield "map", args[1]
    elif args and origin not in (list, dict):  # Optional / Union
        for arg in args:
            yield from _models_in(arg, base)


def _as_spec_error(exc: Exception, data: Any, path: tuple[str | int, ...]) -> JobSpecError:
    errors = getattr(exc, "errors", None)
    if not callable(errors):  # a oneOf model (a quantity): what it tried, before its details
        return JobSpecError(_dotted(path), f"{str(exc).split('. Details')[0]}, got {quoted(data)}")
    first = errors()[0]
    where = _dotted((*path, *first.get("loc", ())))
    return JobSpecError(where, f"{first.get('msg')}, got {quoted(first.get('input'))}")


def _dotted(path: tuple[str | int, ...]) -> str:
    """``spec.trainer.env[0].name``: a list's index in brackets."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def _first_dropped(given: Any, kept: Any, path: str) -> str | None:
    """The path of the first key in ``given`` that the models did not keep."""
    if isinstance(given, Mapping):
        if not isinstance(kept, Mapping):
            return None
        for key, value in given.items():
            if key not in kept:
                # Quantities and free-form maps (labels, resources) are kept whole; a null is simply unset.
                if value is None:
                    continue
                return f"{path}.{key}"
            found = _first_dropped(value, kept[key], f"{path}.{key}")
            if found:
                return found
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(given, kept, strict=False)):
            found = _first_dropped(a, b, f"{path}[{i}]")
            if found:
                return found
    return None

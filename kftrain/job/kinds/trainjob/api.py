"""Check a TrainJob manifest's shape with Kubeflow Trainer's own models (the ``kubeflow-trainer-api`` package).

Those pydantic models type every field of the v2.3.0 API, but drop fields they do not know; the API server
would prune them too, silently. A misspelt field (``numNode``) would then change what runs without a word, so
a field the models drop is refused here, naming it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kftrain.errors import JobSpecError

_TOP_LEVEL_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


def check_trainjob(data: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob's ``spec``, after checking the whole manifest against Trainer's models."""
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    unknown = sorted(set(map(str, data)) - _TOP_LEVEL_KEYS)
    if unknown:
        raise JobSpecError(unknown[0], "unknown top-level field")
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise JobSpecError("spec", "missing or not a mapping")
    if not isinstance(spec.get("runtimeRef"), Mapping) or not spec["runtimeRef"].get("name"):
        raise JobSpecError("spec.runtimeRef.name", "missing: a TrainJob names the runtime it runs on")
    given = {"apiVersion": data["apiVersion"], "kind": data["kind"], "spec": copy.deepcopy(dict(spec))}
    try:
        parsed = TrainerV1alpha1TrainJob.from_dict(given).to_dict()
    except ValueError as exc:  # pydantic's ValidationError
        raise JobSpecError("spec", _pydantic_message(exc)) from None
    dropped = _first_dropped(given["spec"], parsed.get("spec") or {}, "spec")
    if dropped:
        raise JobSpecError(dropped, "unknown field (not in the TrainJob API of Kubeflow Trainer v2.3.0)")
    return given["spec"]


def _pydantic_message(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')} (got {first.get('input')!r})"[:300]
    return " ".join(str(exc).split())[:300]


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

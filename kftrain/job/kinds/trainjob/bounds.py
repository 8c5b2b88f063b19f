"""The bounds Kubeflow Trainer v2.3.0's TrainJob CRD puts on a TrainJob's own fields, checked on every TrainJob kftrain
loads, with the CRD files (``--crd-dir``) or without them (kftrain does not ship the operator's CRDs).

The schema part is kept as kubeflow/trainer@v2.3.0:manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml has it
(each marker's line in pkg/apis/trainer/v1alpha1/trainjob_types.go cited below) and checked by
:func:`kftrain.job.manifest.schema.schema_problems`; each CEL rule kept has its meaning in Python beside it
(:data:`_HOLDS`). tests/job/kinds/trainjob/test_trainjob_crd_bounds.py holds both to the CRD file and cel-python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.manifest.schema import schema_problems

_CRD = "the TrainJob CRD of Kubeflow Trainer v2.3.0"

# trainjob_types.go:199-200 (dataset) and :225-226 (model).
STORAGE_URI_RULE = "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"
STORAGE_URI_MESSAGE = "storageUri may be empty, or it must be a valid URI (scheme://...)"
# CEL's matches() is RE2's search; with ^ and $ (no multi-line flag) it is a full match, and RE2's '.' takes no
# newline, as Python's does not.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+")
_HOLDS: dict[str, Callable[[Any], bool]] = {
    STORAGE_URI_RULE: lambda uri: not isinstance(uri, str) or uri == "" or _URI.fullmatch(uri) is not None,
}


def _storage_uri() -> dict[str, Any]:
    return {
        "maxLength": 2048,
        "x-kubernetes-validations": [{"message": STORAGE_URI_MESSAGE, "rule": STORAGE_URI_RULE}],
    }


def _initializer(env_max_items: int) -> dict[str, Any]:
    return {"properties": {"env": {"maxItems": env_max_items}, "storageUri": _storage_uri()}}


# The part of the TrainJob CRD's openAPIV3Schema that bounds its spec's own fields (trainjob_types.go lines).
SCHEMA: Mapping[str, Any] = {
    "properties": {
        "spec": {
            "properties": {
                "activeDeadlineSeconds": {"minimum": 1},  # :137
                "managedBy": {"maxLength": 253},  # :149 (its CEL rule: webhooks.MANAGED_BY)
                "runtimeRef": {
                    "properties": {
                        "name": {"minLength": 1, "maxLength": 253},  # :160-161
                        "apiGroup": {"maxLength": 253},  # :168
                        "kind": {"maxLength": 253},  # :175
                    }
                },
                "initializer": {
                    "properties": {
                        "dataset": _initializer(128),  # :199-200, :208
                        "model": _initializer(128),  # :225-226, :234
                    }
                },
                "trainer": {
                    "properties": {
                        "image": {"maxLength": 500},  # :249
                        "command": {"maxItems": 128, "items": {"maxLength": 1048576}},  # :255-256
                        "args": {"maxItems": 128, "items": {"maxLength": 1048576}},  # :262-263
                        "env": {"maxItems": 128},  # :271
                    }
                },
                "runtimePatches": {  # :122
                    "maxItems": 16,
                    "items": {"properties": {"manager": {"minLength": 1, "maxLength": 253}}},  # :297-298
                },
            }
        }
    }
}


def check_bounds(manifest: Mapping[str, Any]) -> None:
    """Refuse the first of ``manifest``'s fields out of :data:`SCHEMA`'s bounds, naming it, as the API server words
    it; before anything is built from the manifest (a list of 400,000 args is refused by its length)."""
    problem = next(schema_problems(SCHEMA, manifest), None)
    if problem is not None:
        raise JobSpecError(problem.path, f"{problem.message} ({_CRD})")
    for path, rule, message, value in rule_sites(SCHEMA, manifest, ()):
        if not _HOLDS[rule](value):
            raise JobSpecError(".".join(path), f"{message} ({_CRD})")


def rule_sites(schema: Mapping[str, Any], value: Any, path: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """(path, rule, message, value) for each ``x-kubernetes-validations`` rule of ``schema`` where ``value`` has a
    non-null value (the API server evaluates no rule on a null: apiextensions-apiserver's schema/cel/validation.go,
    validateExpressions). :data:`SCHEMA` puts rules on object fields only, not on list items."""
    if value is None:
        return
    for entry in schema.get("x-kubernetes-validations") or []:
        yield path, entry["rule"], entry["message"], value
    if isinstance(value, Mapping):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                yield from rule_sites(sub, value[key], (*path, key))

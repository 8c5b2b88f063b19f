"""Validate manifests against the operators' real CRD OpenAPI v3 schemas, and their CEL validation rules.

The CRDs are not shipped with kftrain (they belong to the operators); point
``KFTRAIN_CRD_DIR`` or the ``crd_dir`` argument at a folder of CRD YAML files.

A CRD's schema may carry rules in the Common Expression Language (``x-kubernetes-validations``, e.g. Kubeflow Trainer
v2.3.0's TrainJob: ``self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')``, ``managedBy`` one of two
controllers). The API server evaluates each where its schema node applies, with ``self`` the value there, and
refuses the object with the rule's message when one is false (or fails to evaluate). They are evaluated here with a
CEL implementation (``cel-python``, the ``[crd]`` extra), never re-written by hand. Transition rules (those that
read ``oldSelf``) apply only to an update of an existing object, so a create never evaluates them
(kubernetes/apiextensions-apiserver's CEL validator does the same).

A structural schema also says how each list is merged, and the API server holds every list to it
(kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go,
ValidateListSetsAndMaps): a list of ``x-kubernetes-list-type: map`` is keyed by its ``x-kubernetes-list-map-keys``,
each key once (a container's ``env`` by ``name``, a pod's ``containers`` by ``name``, ``ports`` by ``containerPort``
and ``protocol``), and one of ``x-kubernetes-list-type: set`` holds each item once. Two items of one key would be
merged into one by a server-side apply, so the create is refused instead.

The API server judges the object after the CRD's defaults are filled in (the request is decoded through them:
kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go,
unstructuredDefaulter.Default), so a port without ``protocol`` is the same key as one with ``protocol: TCP``: the
schema, the lists and the CEL rules are checked here on the manifest with those defaults too.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kftrain.errors import JobSpecError
from kftrain.extras import requires


@dataclass(frozen=True)
class CELRule:
    """One ``x-kubernetes-validations`` entry, and where it applies: the path of schema keys from the root, where
    ``[]`` is every item of a list and ``{}`` every value of a map."""

    where: tuple[str, ...]
    rule: str
    message: str

    @property
    def is_transition(self) -> bool:
        return "oldSelf" in self.rule


@dataclass(frozen=True)
class CRDVersion:
    group: str
    kind: str
    plural: str
    version: str
    schema: Mapping[str, Any]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def rules(self) -> list[CELRule]:
        """The CEL rules a create evaluates (transition rules excepted)."""
        found: list[CELRule] = []
        _collect_rules(self.schema, (), found)
        return [r for r in found if not r.is_transition]


class CRDSchemas:
    """The versions served by a set of CRDs, keyed by (apiVersion, kind)."""

    def __init__(self, versions: list[CRDVersion]) -> None:
        self._versions = {(v.api_version, v.kind): v for v in versions}
        self._programs: dict[str, Any] = {}  # a rule's text -> its compiled program

    @classmethod
    def from_dir(cls, crd_dir: str | Path | None = None) -> CRDSchemas:
        folder = Path(crd_dir or os.environ.get("KFTRAIN_CRD_DIR", ""))
        if not str(folder) or not folder.is_dir():
            raise JobSpecError("--crd-dir", f"CRD folder not found: {folder!s} (set KFTRAIN_CRD_DIR)")
        versions: list[CRDVersion] = []
        for path in sorted(folder.glob("*.yaml")):
            try:
                versions.extend(_served_versions(path))
            except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
                problem = " ".join(str(exc).split())[:200]
                raise JobSpecError(str(path), f"not a readable CustomResourceDefinition: {problem}") from None
        return cls(versions)

    def get(self, api_version: str, kind: str) -> CRDVersion | None:
        return self._versions.get((api_version, kind))

    def versions(self) -> list[CRDVersion]:
        return list(self._versions.values())

    def errors(self, manifest: Mapping[str, Any]) -> list[str]:
        """Every schema violation of ``manifest``, as ``path: message`` lines."""
        crd = self.get(str(manifest.get("apiVersion")), str(manifest.get("kind")))
        if crd is None:
            return [f"apiVersion/kind: no CRD serves {manifest.get('apiVersion')} {manifest.get('kind')}"]
        manifest = defaulted(manifest, crd.schema)
        validator = jsonschema.Draft7Validator(crd.schema)
        out = []
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
            path = ".".join(str(p) for p in err.absolute_path) or "<root>"
            out.append(f"{path}: {err.message}")
        # The API server's order: the schema, the lists' keys, then the CEL rules (strategy.go, Validate).
        return out + list_errors(crd.schema, manifest) + self.rule_errors(crd, manifest)

    def rule_errors(self, crd: CRDVersion, manifest: Mapping[str, Any]) -> list[str]:
        """Every CEL rule of ``crd`` that ``manifest`` breaks, as ``path: message`` lines."""
        rules = crd.rules
        if not rules:
            return []
        with requires("crd", "evaluating the CRDs' validation rules (x-kubernetes-validations)"):
            import celpy
        out = []
        for rule in rules:
            for path, value in _values_at(manifest, rule.where, ()):
                if not self._holds(celpy, rule.rule, value):
                    where = "".join(p if p.startswith("[") else f".{p}" for p in path).lstrip(".") or "<root>"
                    out.append(f"{where}: {rule.message or 'failed rule: ' + rule.rule}")
        return out

    def _holds(self, celpy: Any, rule: str, value: Any) -> bool:
        program = self._programs.get(rule)
        if program is None:
            env = celpy.Environment()
            program = self._programs[rule] = env.program(env.compile(rule))
        try:
            return bool(program.evaluate({"self": celpy.json_to_cel(value)}))
        except celpy.CELEvalError:
            return False  # the API server refuses an object a rule cannot be evaluated on

    def validate(self, manifest: Mapping[str, Any]) -> None:
        errors = self.errors(manifest)
        if errors:
            first = errors[0]
            field, _, message = first.partition(": ")
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise JobSpecError(field, f"rejected by the CRD schema: {message}{more}")


def defaulted(value: Any, schema: Any) -> Any:
    """A copy of ``value`` with the schema's defaults where it has no value, as the API server fills them in
    (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting/algorithm.go,
    Default): a property's ``default`` when the property is missing, or null where the schema is not nullable."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = dict(value)
        for key, prop in props.items():
            if isinstance(prop, Mapping) and "default" in prop and _non_nullable_null(out, key, prop):
                out[key] = copy.deepcopy(prop["default"])
        for key, item in out.items():
            if key in props:
                out[key] = defaulted(item, props[key])
            elif isinstance(extra, Mapping):
                out[key] = defaulted(copy.deepcopy(extra["default"]) if _null_defaulted(item, extra) else item, extra)
        return out
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [defaulted(copy.deepcopy(items["default"]) if _null_defaulted(i, items) else i, items) for i in value]
    return value


def _non_nullable_null(obj: Mapping[str, Any], key: str, prop: Mapping[str, Any]) -> bool:
    """Whether ``obj`` lacks ``key``, or holds a null there that ``prop`` does not allow: the default goes there."""
    return key not in obj or (obj[key] is None and not prop.get("nullable"))


def _null_defaulted(value: Any, schema: Mapping[str, Any]) -> bool:
    return value is None and not schema.get("nullable") and "default" in schema


def list_errors(schema: Any, value: Any, path: str = "") -> list[str]:
    """Every list of ``value`` that breaks its schema's ``x-kubernetes-list-type`` (``map``: a key twice; ``set``: an
    item twice), as ``path: message`` lines naming the repeat (listtype/validation.go, validateListSetsAndMapsArray).
    Lists nested in lists and maps are checked wherever the schema describes them, as ValidateListSetsAndMaps walks
    them: a map's values by ``additionalProperties``, an object's fields by ``properties``."""
    if not isinstance(schema, Mapping):
        return []
    out: list[str] = []
    if isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            out += _repeats(path, [_identity(v) for v in value], value, "the list is a set")
        elif list_type == "map":
            out += _map_repeats(path, schema, value)
        for i, item in enumerate(value):
            out += list_errors(schema.get("items"), item, f"{path}[{i}]")
    elif isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in props:
                out += list_errors(props[key], item, where)
            elif isinstance(extra, Mapping):
                out += list_errors(extra, item, where)
    return out


def _map_repeats(path: str, schema: Mapping[str, Any], items: list[Any]) -> list[str]:
    """validateListMap: every item an object (or null), and the tuple of its key fields (those it has) once."""
    for i, item in enumerate(items):
        if item is not None and not isinstance(item, Mapping):
            return [f"{path}[{i}]: must be an object for an array of list-type map"]
    keys = [str(k) for k in schema.get("x-kubernetes-list-map-keys") or []]
    # The key fields an item has: one without a key field has no value there, which is not a null value (the Go
    # code's unspecifiedKeyValue), and two such are one key.
    shown = [{k: item[k] for k in keys if k in item} if isinstance(item, Mapping) else {} for item in items]
    if len(keys) == 1:
        # One key field: its values compared as they are (a 1 and a 1.0 differ), a missing one as its own value.
        identities = [_identity(key[keys[0]]) if key else "unspecified" for key in shown]
    else:
        identities = [_identity(key) for key in shown]
    return _repeats(path, identities, shown, f"the list is keyed by {', '.join(keys)}")


def _repeats(path: str, identities: list[str], shown: list[Any], why: str) -> list[str]:
    """An error at the second item of each identity held more than once, showing its value (validateListSet: a
    third adds none), and where the first is."""
    first: dict[str, int] = {}
    reported: set[str] = set()
    out = []
    for i, identity in enumerate(identities):
        if identity not in first:
            first[identity] = i
        elif identity not in reported:
            reported.add(identity)
            value = json.dumps(shown[i], sort_keys=True)
            name = path.rsplit(".", 1)[-1]  # the list's own field: its full path starts the line
            out.append(f"{path}[{i}]: duplicate value {value} (also {name}[{first[identity]}]; {why})")
    return out


def _identity(value: Any) -> str:
    """What the API server tells list items apart by: a scalar by its type and value (Go's ``==`` on the decoded
    JSON: ``1``, ``1.0`` and ``true`` differ), an object or a list by its JSON (``json.Marshal``: keys sorted, a whole
    float written as an integer)."""
    if isinstance(value, (Mapping, list)):
        return "json:" + json.dumps(_as_go_json(value), sort_keys=True, separators=(",", ":"))
    return f"{type(value).__name__}:{value!r}"


def _as_go_json(value: Any) -> Any:
    """``value`` with each whole float below 1e21 as an integer: Go's JSON writes ``1.0`` as ``1`` (and Python as
    ``1.0``), so an object of either is one value to the API server."""
    if isinstance(value, Mapping):
        return {k: _as_go_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_go_json(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def _collect_rules(schema: Any, where: tuple[str, ...], out: list[CELRule]) -> None:
    if not isinstance(schema, Mapping):
        return
    for entry in schema.get("x-kubernetes-validations") or []:
        out.append(CELRule(where, str(entry["rule"]), str(entry.get("message") or "")))
    for key, sub in (schema.get("properties") or {}).items():
        _collect_rules(sub, (*where, key), out)
    if isinstance(schema.get("items"), Mapping):
        _collect_rules(schema["items"], (*where, "[]"), out)
    if isinstance(schema.get("additionalProperties"), Mapping):
        _collect_rules(schema["additionalProperties"], (*where, "{}"), out)


def _values_at(value: Any, where: tuple[str, ...], path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """Every value of ``value`` at schema path ``where`` (with its path in the object): a rule applies only where
    the object has a value."""
    if not where:
        return [(path, value)]
    step, rest = where[0], where[1:]
    if step == "[]":
        items = value if isinstance(value, list) else []
        return [found for i, item in enumerate(items) for found in _values_at(item, rest, (*path, f"[{i}]"))]
    if step == "{}":
        entries = value.items() if isinstance(value, Mapping) else []
        return [found for k, item in entries for found in _values_at(item, rest, (*path, str(k)))]
    if isinstance(value, Mapping) and step in value:
        return _values_at(value[step], rest, (*path, step))
    return []


def _served_versions(path: Path) -> list[CRDVersion]:
    """The served versions of every CustomResourceDefinition in the YAML file at ``path``."""
    versions: list[CRDVersion] = []
    # The CRD files are large: libyaml, when PyYAML has it, parses them ten times faster.
    for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for v in spec["versions"]:
            if not v.get("served", True):
                continue
            versions.append(
                CRDVersion(
                    group=spec["group"],
                    kind=spec["names"]["kind"],
                    plural=spec["names"]["plural"],
                    version=v["name"],
                    schema=v["schema"]["openAPIV3Schema"],
                )
            )
    return versions

"""Validate manifests against the operators' real CRD OpenAPI v3 schemas, and their CEL validation rules.

The CRDs are the operators' (``KFTRAIN_CRD_DIR`` or ``crd_dir``). As the API server does, after filling in the CRD's
defaults: each list is held to its ``x-kubernetes-list-type`` (a ``map`` key once, a ``set`` item once); the
``x-kubernetes-validations`` run in cel-python (the ``[crd]`` extra) within the server's cost limits
(:mod:`kftrain.job.manifest.cel`), transition rules (``oldSelf``) skipped on a create, none where the schema already
refuses a type, enum or bound. Sources: k8s.io/apiextensions-apiserver@v0.36.3:pkg/apiserver/ (cited where each
rule is encoded). No line quotes more than :data:`~kftrain.errors.MAX_QUOTED_CHARS` characters of a value.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kftrain.errors import MAX_FIELD_CHARS, MAX_MESSAGE_CHARS, MAX_QUOTED_CHARS, JobSpecError, bounded, quoted
from kftrain.extras import requires
from kftrain.job.manifest import cel

# The schema errors after which the API server evaluates no CEL rule, by the JSON Schema keyword that finds each
# (k8s.io/apiextensions-apiserver@v0.36.3:pkg/registry/customresource/strategy.go, hasBlockingErr: Required,
# NotSupported, TooLong, TooMany, TypeInvalid).
_BLOCKING = frozenset({"required", "enum", "maxLength", "maxItems", "maxProperties", "type"})
# strategy.go, hasBlockingErr: the line it adds instead of the rules' errors.
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the existing errors to "
    "complete validation"
)


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
    source: str = ""  # the CRD file, named when one of its rules is broken
    # Whether the version has the /status subresource: a write to the object itself then leaves status alone.
    status_subresource: bool = False

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
        self._programs: dict[str, cel.CompiledRule] = {}  # a rule's text -> its compiled program
        self._has_rules: dict[int, bool] = {}  # id(schema node) -> whether a rule applies at or below it

    @classmethod
    def from_dir(cls, crd_dir: str | Path | None = None) -> CRDSchemas:
        folder = Path(crd_dir or os.environ.get("KFTRAIN_CRD_DIR", ""))
        if not str(folder) or not folder.is_dir():
            raise JobSpecError("--crd-dir", f"CRD folder not found: {folder!s} (set KFTRAIN_CRD_DIR)")
        versions: list[CRDVersion] = []
        for path in sorted(folder.glob("*.yaml")):
            try:
                versions.extend(dataclasses.replace(v, source=str(path)) for v in _served_versions(path))
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
            return [_one_line(f"apiVersion/kind: no CRD serves {manifest.get('apiVersion')} {manifest.get('kind')}")]
        manifest = defaulted(manifest, crd.schema)
        problems = sorted(schema_problems(crd.schema, manifest), key=lambda p: p.sort_key)
        out = [f"{p.path}: {p.message}" for p in problems]
        # The API server's order: the schema, the lists' keys, then the CEL rules (strategy.go, Validate).
        out += list_errors(crd.schema, manifest)
        if any(p.keyword in _BLOCKING for p in problems):
            out += [f"<root>: {NOT_CHECKED}"] if self._applies(crd.schema) else []
        else:
            out += self.rule_errors(crd, manifest)
        return [_one_line(line) for line in out]

    def rule_errors(self, crd: CRDVersion, manifest: Mapping[str, Any]) -> list[str]:
        """Every CEL rule of ``crd`` that ``manifest`` breaks, as ``path: message`` lines, evaluated as the API
        server walks the object (apiextensions-apiserver's schema/cel/validation.go, validate: a node's rules, then
        its items or fields), until the cost budget runs out."""
        if not self._applies(crd.schema):
            return []
        with requires("crd", "evaluating the CRDs' validation rules (x-kubernetes-validations)"):
            import celpy
        self._compile(celpy, crd)
        out: list[str] = []
        try:
            self._check_node(celpy, crd.schema, manifest, None, (), cel.Budget(), out)
        except cel.Stop as stop:
            out.append(f"{_shown_path(stop.where)}: {stop.message}")
        return out

    def _compile(self, celpy: Any, crd: CRDVersion) -> None:
        """Every rule of ``crd`` compiled, before any is evaluated: one that does not parse is the CRD's error (the
        API server would not have created the CRD), named with its file, its place in the schema and its text."""
        for rule in crd.rules:
            if rule.rule.strip() and rule.rule not in self._programs:
                try:
                    self._programs[rule.rule] = cel.CompiledRule(celpy, rule.rule)
                except cel.RuleCompileError as exc:
                    where = "".join(p if p in ("[]", "{}") else f".{p}" for p in rule.where).lstrip(".") or "<root>"
                    raise JobSpecError(
                        crd.source or f"{crd.kind} {crd.api_version}",
                        f"the {crd.kind} CRD's x-kubernetes-validations rule at {where} {exc}: "
                        f"{quoted(rule.rule)}; the API server refuses such a CRD",
                    ) from None

    def _applies(self, schema: Any) -> bool:
        """Whether a rule a create evaluates is at ``schema`` or below it."""
        if not isinstance(schema, Mapping):
            return False
        key = id(schema)
        if key not in self._has_rules:
            own = any("oldSelf" not in str(e.get("rule")) for e in schema.get("x-kubernetes-validations") or [])
            below = [*(schema.get("properties") or {}).values(), schema.get("items")]
            below.append(schema.get("additionalProperties"))
            self._has_rules[key] = own or any(self._applies(sub) for sub in below)
        return self._has_rules[key]

    def _check_node(
        self,
        celpy: Any,
        schema: Mapping[str, Any],
        value: Any,
        as_cel: Any,
        path: tuple[str, ...],
        budget: cel.Budget,
        out: list[str],
    ) -> None:
        """The rules at ``schema`` on ``value`` (``as_cel``: it as a CEL value, once converted), then those below.
        A null value has none evaluated (validation.go, validateExpressions)."""
        if value is None or not self._applies(schema):
            return
        rules = [
            e
            for e in schema.get("x-kubernetes-validations") or []
            if str(e.get("rule") or "").strip() and "oldSelf" not in str(e["rule"])
        ]
        if rules:
            if as_cel is None:
                as_cel = celpy.json_to_cel(value)  # once: the nodes below read their part of it
            for entry in rules:
                rule, message = str(entry["rule"]), str(entry.get("message") or "").strip()
                try:
                    holds = cel.evaluate(self._programs[rule], as_cel, budget, message or rule.strip())
                except cel.Stop as stop:
                    stop.where = stop.where or path
                    raise
                if not holds:
                    out.append(f"{_shown_path(path)}: {message or 'failed rule: ' + rule.strip()}")
        items, props, extra = schema.get("items"), schema.get("properties") or {}, schema.get("additionalProperties")
        if isinstance(value, list) and isinstance(items, Mapping):
            for i, item in enumerate(value):
                part = as_cel[i] if as_cel is not None else None
                self._check_node(celpy, items, item, part, (*path, f"[{i}]"), budget, out)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                sub = props.get(key, extra)
                if isinstance(sub, Mapping):
                    part = as_cel[key] if as_cel is not None else None
                    self._check_node(celpy, sub, item, part, (*path, str(key)), budget, out)

    def validate(self, manifest: Mapping[str, Any]) -> None:
        errors = self.errors(manifest)
        if errors:
            first = errors[0]
            field, _, message = first.partition(": ")
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise JobSpecError(field, f"rejected by the CRD schema: {message}{more}")


@dataclass(frozen=True)
class SchemaProblem:
    """One way a value breaks an OpenAPI schema: where (``spec.trainer.args``), what the API server says of it, and
    the JSON Schema keyword that found it."""

    path: str
    message: str
    keyword: str
    sort_key: tuple[str, ...]


def _items_within_bounds(validator: Any, items: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """JSON Schema's ``items``, bounded for a hostile list: a list over its ``maxItems`` is refused already (Too
    many), so its items are not each checked; and a scalar item equal to one already found valid is valid (a 7 KB
    manifest of YAML aliases expands to a million items, mostly one value repeated)."""
    if not isinstance(instance, list) or not isinstance(items, Mapping):
        yield from _DRAFT7_ITEMS(validator, items, instance, schema)
        return
    if len(instance) > schema.get("maxItems", len(instance)):
        return
    valid: set[tuple[type, Any]] = set()
    for index, item in enumerate(instance):
        key = (type(item), item) if isinstance(item, (str, int, float, bool)) else None
        if key is not None and key in valid:
            continue
        errors = list(validator.descend(item, items, path=index))
        if not errors and key is not None:
            valid.add(key)
        yield from errors


_DRAFT7_ITEMS = jsonschema.Draft7Validator.VALIDATORS["items"]
_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"items": _items_within_bounds})


def schema_problems(schema: Mapping[str, Any], value: Any) -> Iterator[SchemaProblem]:
    """Each way ``value`` breaks ``schema`` (its OpenAPI v3 keywords: types, bounds, patterns, enums), in the order
    the schema's keywords find them. A bound is worded as the API server words it
    (k8s.io/apiextensions-apiserver@v0.36.3:pkg/apiserver/validation/validation.go, kubeOpenAPIResultToFieldErrors;
    k8s.io/apimachinery@v0.36.3:pkg/util/validation/field/errors.go, TooLong and TooMany), quoting nothing; other
    messages quote the value at most :data:`~kftrain.errors.MAX_QUOTED_CHARS` characters long. The items of a list
    over its ``maxItems`` are not checked one by one (where the API server reports theirs too)."""
    for err in _Validator(schema).iter_errors(value):
        path = _shown_path(tuple(f"[{p}]" if isinstance(p, int) else str(p) for p in err.absolute_path))
        order = tuple(f"{p:020d}" if isinstance(p, int) else str(p) for p in err.absolute_path)  # [2] before [10]
        yield SchemaProblem(path, _worded(err), str(err.validator), order)


def _worded(err: jsonschema.ValidationError) -> str:
    limit, instance = err.validator_value, err.instance
    if err.validator in ("maxItems", "maxProperties") and isinstance(instance, (list, Mapping)):
        return f"Too many: {len(instance)}: must have at most {limit} items"
    if err.validator == "maxLength":
        return f"Too long: may not be more than {limit} bytes"
    text = repr(instance)
    if len(text) > MAX_QUOTED_CHARS and text in err.message:
        return err.message.replace(text, quoted(instance))
    return bounded(err.message, 4 * MAX_QUOTED_CHARS)


def _one_line(line: str) -> str:
    """A ``path: message`` line with its path (a map's keys are the user's) and its message bounded, whatever they
    quote: under 1 KB."""
    path, _, message = line.partition(": ")
    return f"{bounded(path, MAX_FIELD_CHARS)}: {bounded(message, MAX_MESSAGE_CHARS)}"


def _shown_path(path: tuple[str, ...]) -> str:
    """``("spec", "items", "[0]")`` as ``spec.items[0]``; the root as ``<root>``."""
    return "".join(p if p.startswith("[") else f".{p}" for p in path).lstrip(".") or "<root>"


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
        if len(value) > schema.get("maxItems", len(value)):
            return []  # refused already (Too many): its items are not each checked (see schema_problems)
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
        return "json:" + json.dumps(as_go_json(value), sort_keys=True, separators=(",", ":"))
    return f"{type(value).__name__}:{value!r}"


def as_go_json(value: Any) -> Any:
    """``value`` with each whole float below 1e21 as an integer: Go's JSON (``json.Marshal``, and protojson for a
    ``structpb.Value``) writes ``1.0`` as ``1`` (Python as ``1.0``), so an object of either is one value to Go."""
    if isinstance(value, Mapping):
        return {k: as_go_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_go_json(v) for v in value]
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


def _served_versions(path: Path) -> list[CRDVersion]:
    """The served versions of every CustomResourceDefinition in the YAML file at ``path``."""
    from kftrain.job.manifest.parse import CRDS, read_yaml_file

    versions: list[CRDVersion] = []
    # Read as a job manifest is: a regular file, bounded in size, aliases and nesting, no repeated key.
    for doc in read_yaml_file(path, CRDS):
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
                    status_subresource="status" in (v.get("subresources") or {}),
                )
            )
    return versions

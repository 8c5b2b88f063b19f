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
"""

from __future__ import annotations

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
        validator = jsonschema.Draft7Validator(crd.schema)
        out = []
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
            path = ".".join(str(p) for p in err.absolute_path) or "<root>"
            out.append(f"{path}: {err.message}")
        return out + self.rule_errors(crd, manifest)

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

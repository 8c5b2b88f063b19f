"""Validate manifests against the operators' real CRD OpenAPI v3 schemas.

The CRDs are not shipped with kftrain (they belong to the operators); point
``KFTRAIN_CRD_DIR`` or the ``crd_dir`` argument at a folder of CRD YAML files.
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


class CRDSchemas:
    """The versions served by a set of CRDs, keyed by (apiVersion, kind)."""

    def __init__(self, versions: list[CRDVersion]) -> None:
        self._versions = {(v.api_version, v.kind): v for v in versions}

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
        return out

    def validate(self, manifest: Mapping[str, Any]) -> None:
        errors = self.errors(manifest)
        if errors:
            first = errors[0]
            field, _, message = first.partition(": ")
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise JobSpecError(field, f"rejected by the CRD schema: {message}{more}")


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

"""What a real API server makes of a manifest, beside what ``kftrain validate`` says of it: the create as
kftrain's launcher makes it (status, stored object, warnings), what the server did not keep as sent, and the
example manifests (tests/controlplane/test_admission.py, test_admission_bad_input.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from kftrain.cli.app import main as kftrain_main
from testbed import REPO_ROOT, reference
from testbed.controlplane.cluster import ControlPlane

EXAMPLES = REPO_ROOT / "examples" / "manifests"
Manifest = dict[str, Any]


@dataclass
class Answer:
    """The API server's answer to a create."""

    status: int
    body: Manifest
    warnings: list[str]

    @property
    def refused(self) -> bool:
        return self.status >= 400


def create(plane: ControlPlane, custom: Any, manifest: Manifest, namespace: str, *, strict: bool = False) -> Answer:
    """POST ``manifest`` (in ``namespace``, if namespaced) as kftrain's launcher does (CustomObjectsApi, the
    server's default field validation, Warn) or, with ``strict``, with fieldValidation=Strict."""
    where = plane.resource(manifest)
    options: dict[str, Any] = {"_preload_content": False}
    if strict:
        options["field_validation"] = "Strict"
    try:
        if where.namespaced:
            response = custom.create_namespaced_custom_object(
                where.group, where.version, namespace, where.plural, manifest, **options
            )
        else:
            response = custom.create_cluster_custom_object(
                where.group, where.version, where.plural, manifest, **options
            )
    except ApiException as exc:
        return Answer(exc.status, json.loads(exc.body or "{}"), [])
    return Answer(response.status, json.loads(response.data), response.headers.getlist("Warning"))


def kftrain_validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``kftrain validate -f path --crd-dir <the reference CRDs>``: its exit code and what it printed."""
    capsys.readouterr()
    code = kftrain_main(["validate", "-f", str(path), "--crd-dir", str(reference.CRD_DIR)])
    out = capsys.readouterr()
    return code, (out.err + out.out).strip()


def not_kept(sent: Any, stored: Any, where: str = "") -> list[str]:
    """The paths of ``sent`` that ``stored`` lacks or holds otherwise (what pruning or a coercion changed);
    what the server added (defaults, metadata) is not counted."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return [p for k, v in sent.items() for p in not_kept(v, stored.get(k), f"{where}.{k}")]
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=True)) for p in not_kept(a, b, f"{where}[{i}]")]
    return [] if sent == stored else [where or "."]


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def load(path: Path) -> Manifest:
    manifest: Manifest = yaml.safe_load(path.read_text())
    return manifest

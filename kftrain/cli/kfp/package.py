"""The pipeline to submit, checked before anything talks to the server.

``PIPELINE`` is a shipped pipeline by name (``pytorch-digits``: its committed ``pipeline.yaml``) or
the path of a compiled pipeline file. Its parameters are checked against the file's root inputs, its
name against KFP's rules, and a new version is named ``<package version>-<git sha>`` (``nogit``
outside a git checkout).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain import __version__
from kftrain.cli.params import parse_params
from kftrain.cli.pipelines import shipped_pipelines
from kftrain.errors import KftrainError


@dataclass(frozen=True)
class PipelinePackage:
    path: Path
    name: str  # pipelineInfo.name, the default display name on the server
    parameters: frozenset[str] | None  # the root's input parameters (None: not known, no check)


def resolve_package(pipeline: str) -> PipelinePackage:
    """A shipped pipeline by name (its committed ``pipeline.yaml``) or a compiled pipeline file by path."""
    path = Path(pipeline)
    if not (path.suffix in (".yaml", ".yml", ".json", ".zip", ".gz", ".tgz") or path.exists()):
        shipped = shipped_pipelines()
        if pipeline not in shipped:
            raise KftrainError(
                f"unknown pipeline {pipeline!r}: not a file, and not one of {', '.join(sorted(shipped))}"
            )
        spec = importlib.util.find_spec(shipped[pipeline])
        if spec is None or spec.origin is None:
            raise KftrainError(f"pipeline {pipeline!r}: cannot locate module {shipped[pipeline]}")
        path = Path(spec.origin).with_name("pipeline.yaml")
        if not path.is_file():
            raise KftrainError(f"pipeline {pipeline!r}: {path} is missing (run `kftrain compile`)")
    elif not path.is_file():
        raise KftrainError(f"pipeline file {path} does not exist")
    return _read_package(path)


def _read_package(path: Path) -> PipelinePackage:
    if path.suffix not in (".yaml", ".yml", ".json"):  # an archive: the server reads it
        return PipelinePackage(path=path, name=path.name.split(".")[0], parameters=None)
    import yaml

    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on a compiled pipeline
        docs = [d for d in yaml.load_all(path.read_text(), Loader=loader) if d is not None]
    except yaml.YAMLError as exc:
        raise KftrainError(f"{path}: not valid YAML: {exc}") from exc
    spec = docs[0] if docs else None
    if isinstance(spec, dict) and "pipelineSpec" in spec:  # a PipelineJob wrapper
        spec = spec["pipelineSpec"]
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise KftrainError(f"{path}: not a compiled KFP pipeline (no pipelineInfo/root)")
    name = str(spec["pipelineInfo"].get("name") or path.parent.name)
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {}) or {}
    return PipelinePackage(path=path, name=name, parameters=frozenset(params))


def check_params(package: PipelinePackage, params: Mapping[str, Any]) -> None:
    """Refuse a parameter the pipeline does not take (when its parameters are known)."""
    if package.parameters is None:
        return
    unknown = sorted(set(params) - package.parameters)
    if unknown:
        raise KftrainError(
            f"{package.name}: unknown parameter(s) {', '.join(unknown)}; "
            f"the pipeline takes {', '.join(sorted(package.parameters)) or 'none'}"
        )


def git_sha(where: Path) -> str:
    """``git rev-parse --short HEAD`` in ``where``, or ``nogit``."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "nogit"
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else "nogit"


def default_version_name(package: PipelinePackage) -> str:
    return f"{__version__}-{git_sha(package.path.resolve().parent)}"


@dataclass(frozen=True)
class Prepared:
    """What a submit or a schedule uploads and runs, every part checked locally."""

    package: PipelinePackage
    params: dict[str, Any]
    name: str  # the pipeline's name on the server
    version_name: str  # the name of a new version, when the pipeline exists


def prepare(args: argparse.Namespace) -> Prepared:
    """Everything checked locally before the first request: package, params, pipeline and version names."""
    package = resolve_package(args.pipeline)
    params = parse_params(args.param, args.params_file)
    check_params(package, params)
    name = args.pipeline_name or package.name
    from kfp.client.client import validate_pipeline_display_name

    try:
        validate_pipeline_display_name(name)
    except ValueError as exc:
        raise KftrainError(f"--pipeline-name {name!r}: {exc}") from exc
    version_name = args.version_name or default_version_name(package)
    return Prepared(package=package, params=params, name=name, version_name=version_name)

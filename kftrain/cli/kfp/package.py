"""The pipeline to submit, checked before anything talks to the server.

``PIPELINE`` (:mod:`kftrain.cli.reference`) is a shipped name, a compiled file, or ``MODULE:FUNCTION`` compiled now
into a temporary folder that lives as long as :func:`prepare`'s block. Its parameters are checked against the root
inputs, its name against KFP's rules; its version is ``<package version>-<git sha>``, plus ``-<8 hex>`` of the
compiled file for ``MODULE:FUNCTION`` (an uncommitted edit is a new version).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kftrain import __version__
from kftrain.cli.isolated import compile_isolated
from kftrain.cli.param_values import check_param_values
from kftrain.cli.params import parse_params
from kftrain.cli.reference import Kind, check_params, parse_reference
from kftrain.errors import KftrainError


@dataclass(frozen=True)
class PipelinePackage:
    path: Path
    name: str  # pipelineInfo.name, the default display name on the server
    parameters: frozenset[str] | None  # the root's input parameters (None: not known, no check)
    required: frozenset[str] = frozenset()  # those without a default
    origin: Path | None = None  # the folder whose git commit names a version (None: the file's)
    digest: str = ""  # the start of the compiled file's SHA-256, for a pipeline compiled now
    types: Mapping[str, str] = field(default_factory=dict)  # each root input parameter's parameterType


def resolve_package(pipeline: str, workdir: Path | None = None) -> PipelinePackage:
    """A shipped pipeline by name (its committed ``pipeline.yaml``), a compiled pipeline file by path, or
    ``MODULE:FUNCTION`` compiled into ``workdir`` (which must then be given)."""
    ref = parse_reference(pipeline)
    if ref.kind is Kind.FILE:
        assert ref.path is not None
        return _read_package(ref.path)
    if ref.kind is Kind.SHIPPED:
        spec = importlib.util.find_spec(ref.module)
        if spec is None or spec.origin is None:
            raise KftrainError(f"pipeline {pipeline!r}: cannot locate module {ref.module}")
        path = Path(spec.origin).with_name("pipeline.yaml")
        if not path.is_file():
            raise KftrainError(f"pipeline {pipeline!r}: {path} is missing (run `kftrain compile`)")
        return _read_package(path)
    if workdir is None:
        raise ValueError("a MODULE:FUNCTION pipeline is compiled into a folder: give workdir")
    # A user's module: imported and compiled in a child process (kftrain.cli.isolated).
    compiled = compile_isolated(pipeline, workdir / "pipeline.yaml", for_cluster=True)
    path = compiled.path.rename(workdir / f"{compiled.name}.yaml")
    package = _read_package(path)
    return replace(
        package,
        origin=Path(compiled.source).resolve().parent if compiled.source else None,
        digest=hashlib.sha256(path.read_bytes()).hexdigest()[:8],
    )


def _read_package(path: Path) -> PipelinePackage:
    if path.suffix not in (".yaml", ".yml", ".json"):  # an archive: the server reads it
        return PipelinePackage(path=path, name=path.name.split(".")[0], parameters=None)
    from kftrain.job.manifest.parse import PIPELINE, read_yaml_file

    docs = read_yaml_file(path, PIPELINE)  # bounded, as a manifest is read
    spec = docs[0] if docs else None
    if isinstance(spec, dict) and "pipelineSpec" in spec:  # a PipelineJob wrapper
        spec = spec["pipelineSpec"]
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise KftrainError(f"{path}: not a compiled KFP pipeline (no pipelineInfo/root)")
    name = str(spec["pipelineInfo"].get("name") or path.parent.name)
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {}) or {}
    # A parameter without a default is compiled without isOptional and defaultValue (kfp 2.17's compiler).
    required = {
        p for p, d in params.items() if isinstance(d, dict) and not d.get("isOptional") and "defaultValue" not in d
    }
    types = {p: str(d.get("parameterType", "")) for p, d in params.items() if isinstance(d, dict)}
    return PipelinePackage(
        path=path, name=name, parameters=frozenset(params), required=frozenset(required), types=types
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
    sha = git_sha(package.origin or package.path.resolve().parent)
    return f"{__version__}-{sha}" + (f"-{package.digest}" if package.digest else "")


@dataclass(frozen=True)
class Prepared:
    """What a submit or a schedule uploads and runs, every part checked locally."""

    package: PipelinePackage
    params: dict[str, Any]
    name: str  # the pipeline's name on the server
    version_name: str  # the name of a new version, when the pipeline exists


@contextlib.contextmanager
def prepare(args: argparse.Namespace) -> Iterator[Prepared]:
    """Everything checked locally before the first request: package, params, pipeline and version names. The
    package's file lasts as long as the block (a pipeline compiled from MODULE:FUNCTION goes with it)."""
    params = parse_params(args.param, args.params_file)
    with tempfile.TemporaryDirectory(prefix="kftrain-compiled-") as workdir:
        package = resolve_package(args.pipeline, Path(workdir))
        check_params(package.name, package.parameters, package.required, params)
        check_param_values(package.name, package.types, params)  # as kftrain run checks them
        name = args.pipeline_name or package.name
        from kfp.client.client import validate_pipeline_display_name

        try:
            validate_pipeline_display_name(name)
        except ValueError as exc:
            raise KftrainError(f"--pipeline-name {name!r}: {exc}") from exc
        version_name = args.version_name or default_version_name(package)
        yield Prepared(package=package, params=params, name=name, version_name=version_name)

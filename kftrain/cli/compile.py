"""``kftrain compile [--check]``: every pipeline to its ``pipeline.yaml``, every component to its ``component.yaml``.

The compiled files are committed (they are what users upload to the Kubeflow UI or load with
``kfp.components.load_component_from_url``), so they are golden files: ``check`` compiles into
memory and names every committed file that differs. Regenerating is an explicit act
(``kftrain compile`` / ``make compile``) and is refused when ``CI`` is set. The documentation's table of the
generic pipeline's parameters is generated the same way, from that pipeline (:mod:`kftrain.cli.doc_tables`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kftrain.cli import doc_tables
from kftrain.cli.isolated import compile_isolated
from kftrain.cli.pipelines import COMPONENTS_PACKAGE, PIPELINES_PACKAGE, compile_settings, defined_object, variants
from kftrain.cli.reference import Kind, check_output, compile_to, load_for_compile, parse_reference, pipeline_name
from kftrain.errors import KftrainError

PACKAGES = {"components": COMPONENTS_PACKAGE, "pipelines": PIPELINES_PACKAGE}
SOURCES = {"components": "component.py", "pipelines": "pipeline.py"}
OUTPUTS = {"components": "component.yaml", "pipelines": "pipeline.yaml"}


@dataclass(frozen=True)
class Target:
    """One ``component.py`` / ``pipeline.py``, the YAML it compiles to, and its module name; ``variant`` names a
    further component of the module (:func:`kftrain.cli.pipelines.variants`), compiled beside the first."""

    source: Path
    output: Path
    module: str
    variant: str | None = None

    @property
    def is_pipeline(self) -> bool:
        return self.module.startswith(PACKAGES["pipelines"])


def discover(root: Path) -> list[Target]:
    """Every ``<kind>/<category>/<name>/{component,pipeline}.py`` under ``root``, sorted; a component module's
    variants too (``component.<variant>.yaml``).

    A root without them is refused: ``--check`` finding nothing to compare must not pass as "up to date".
    """
    missing = [folder for folder in PACKAGES if not (root / folder).is_dir()]
    if missing:
        raise KftrainError(f"--root {root}: no {' or '.join(f'{m}/' for m in missing)} folder (not a kftrain checkout)")
    targets = []
    for folder, package in PACKAGES.items():
        for source in sorted((root / folder).glob(f"*/*/{SOURCES[folder]}")):
            rel = source.relative_to(root / folder).with_suffix("")
            module = ".".join([package, *rel.parts])
            targets.append(Target(source=source, output=source.with_name(OUTPUTS[folder]), module=module))
            if folder == "components":
                for variant in variants(module):
                    output = source.with_name(f"component.{variant}.yaml")
                    targets.append(Target(source=source, output=output, module=module, variant=variant))
    return targets


def compiled_object(target: Target) -> object:
    """The one component or pipeline defined (not imported) in the target's module, or its variant."""
    if target.variant is not None:
        return variants(target.module)[target.variant]
    return defined_object(target.module, pipeline=target.is_pipeline, where=target.source)


def compile_to_text(target: Target) -> str:
    """The target's compiled YAML, as ``kfp.compiler`` writes it."""
    from kfp import compiler

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / target.output.name
        compiler.Compiler().compile(compiled_object(target), str(out))
        return out.read_text()


def compile_all(root: Path, *, write: bool) -> list[Path]:
    """Compile everything; with ``write`` update the files, else return the stale ones."""
    if write and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise KftrainError("refusing to regenerate compiled YAML in CI: run `make compile` locally and commit")
    stale = []
    targets = discover(root)
    for target in targets:
        text = compile_to_text(target)
        current = target.output.read_text() if target.output.exists() else None
        if current != text:
            stale.append(target.output)
            if write:
                target.output.write_text(text)
    page = doc_tables.parameters_page(root)
    generic = [t for t in targets if t.is_pipeline and t.source.parent.name == doc_tables.PIPELINE]
    if page.exists() and generic:
        current = page.read_text()
        try:
            text = doc_tables.with_table(current, doc_tables.parameter_table(compiled_object(generic[0])))
        except ValueError as exc:
            raise KftrainError(str(exc)) from None
        if text != current:
            stale.append(page)
            if write:
                page.write_text(text)
    return stale


def cmd_compile(args: argparse.Namespace) -> int:
    """``kftrain compile``: write the stale files; with ``--check`` name them and fail instead. ``kftrain compile
    PIPELINE [-o FILE]``: that one pipeline, to ``FILE`` (default: ``<its name>.yaml`` here)."""
    if getattr(args, "pipeline", None):
        return compile_one(args.pipeline, args.output, check=args.check, root=args.root)
    if getattr(args, "output", None):
        raise KftrainError(f"-o {args.output}: name the pipeline to compile (kftrain compile PIPELINE -o FILE)")
    root = Path(args.root).resolve()
    stale = compile_all(root, write=not args.check)
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(root)} (run `make compile` and commit)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        print(f"wrote {path.relative_to(root)}")
    if not stale:
        print("every compiled file is up to date")
    return 0


def compile_one(given: str, output: str | None, *, check: bool, root: str) -> int:
    """``kftrain compile PIPELINE [-o FILE]``, with the compile-time settings of the shipped pipelines: the images'
    registry (``KFTRAIN_IMAGE_REGISTRY``) and their pull secrets on every step (``KFTRAIN_IMAGE_PULL_SECRETS``)."""
    if check or root != ".":
        raise KftrainError("--check and --root are for the committed files (kftrain compile [--check]), not a PIPELINE")
    if output:
        check_output(Path(output))  # before the module is imported
    ref = parse_reference(given)
    if ref.kind is Kind.FUNCTION:  # a user's module: imported in a child process (kftrain.cli.isolated)
        with tempfile.TemporaryDirectory(prefix="kftrain-compile-") as tmp:
            compiled = compile_isolated(given, Path(tmp) / "pipeline.yaml", for_cluster=True)
            name = compiled.name
            path = Path(output) if output else Path(f"{name}.yaml")
            check_output(path)
            shutil.copyfile(compiled.path, path)
    else:
        pipeline = load_for_compile(ref)
        name = pipeline_name(pipeline)
        path = Path(output) if output else Path(f"{name}.yaml")
        compile_to(pipeline, path)
    registry, pull_secrets = compile_settings()
    secrets = ", ".join(pull_secrets) or "none"
    print(
        f"wrote {path}: pipeline {name}; kftrain's step images from {registry} "
        f"(KFTRAIN_IMAGE_REGISTRY), pull secrets of every step: {secrets} (KFTRAIN_IMAGE_PULL_SECRETS)"
    )
    return 0

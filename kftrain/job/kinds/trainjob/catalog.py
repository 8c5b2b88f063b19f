"""The runtimes a TrainJob can name: those Kubeflow Trainer v2.3.0 installs (:mod:`kftrain.job.kinds.trainjob.builtin`),
and those read from manifests (files, folders, ``KFTRAIN_TRAINER_RUNTIMES``), which win by kind and name."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.builtin import builtin_runtimes
from kftrain.job.kinds.trainjob.runtime import RUNTIME_KINDS, Runtime, parse_runtime


class RuntimeCatalog:
    """Runtimes by (kind, name): those Trainer installs, then those read from files (which win)."""

    def __init__(self, runtimes: Iterable[Runtime] = (), *, builtin: bool = True) -> None:
        self._runtimes: dict[tuple[str, str], Runtime] = {}
        if builtin:
            for runtime in builtin_runtimes():
                self.add(runtime)
        for runtime in runtimes:
            self.add(runtime)

    def add(self, runtime: Runtime) -> None:
        self._runtimes[(runtime.kind, runtime.name)] = runtime

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path], *, builtin: bool = True) -> RuntimeCatalog:
        """Every runtime in the YAML files at ``paths`` (a folder: its ``*.yaml`` and ``*.yml``)."""
        found: list[Runtime] = []
        for path in map(Path, paths):
            files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
            if not path.exists():
                raise JobSpecError("--runtimes", f"{path}: no such file or folder")
            for file in files:
                found.extend(_read_runtimes(file))
        return cls(found, builtin=builtin)

    @classmethod
    def from_env(cls) -> RuntimeCatalog:
        """The built-in runtimes, plus those in ``KFTRAIN_TRAINER_RUNTIMES`` (paths separated by ``:``)."""
        paths = [p for p in os.environ.get("KFTRAIN_TRAINER_RUNTIMES", "").split(os.pathsep) if p]
        return cls.from_paths(paths)

    def runtimes(self) -> list[Runtime]:
        return list(self._runtimes.values())

    def names(self) -> list[str]:
        return sorted(f"{kind}/{name}" for kind, name in self._runtimes)

    def find(self, kind: str, name: str) -> Runtime:
        runtime = self._runtimes.get((kind, name))
        if runtime is None:
            known = ", ".join(self.names()) or "none"
            raise JobSpecError(
                "spec.runtimeRef",
                f"no {kind} named {name!r} is known (known: {known}); give its manifest with --runtimes",
            )
        return runtime


def _read_runtimes(path: Path) -> list[Runtime]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise JobSpecError(str(path), f"cannot read runtimes: {' '.join(str(exc).split())[:200]}") from None
    # A folder may hold other manifests next to the runtimes (kustomization.yaml): only runtimes count.
    return runtimes_of(docs, str(path))


def runtimes_of(docs: Iterable[Any], source: str, *, first_index: int = 0) -> list[Runtime]:
    """The runtimes among the YAML documents ``docs`` of ``source``, each checked as Trainer's runtime webhook checks
    it when it is applied."""
    from kftrain.job.kinds.trainjob.webhooks import validate_runtime

    found = []
    for i, doc in enumerate(docs, start=first_index):
        if isinstance(doc, Mapping) and doc.get("kind") in RUNTIME_KINDS:
            runtime = parse_runtime(doc, f"{source}#{i}")
            validate_runtime(runtime)
            found.append(runtime)
    return found

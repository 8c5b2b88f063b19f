"""The runtimes a TrainJob can name: those Kubeflow Trainer v2.3.0 installs (:mod:`kftrain.job.kinds.trainjob.builtin`),
and those read from manifests (files, folders, ``KFTRAIN_TRAINER_RUNTIMES``), which win by kind and name.

A file's runtime of a built-in's kind and name is taken, with a line saying so: a cluster holds one
ClusterTrainingRuntime of a name, got by name alone
(kubeflow/trainer@v2.3.0:pkg/runtime/core/clustertrainingruntime.go:68), so the file describes the cluster's. A
TrainingRuntime is another object, got by the job's namespace and name (pkg/runtime/core/trainingruntime.go:97): it
replaces nothing (runtimeRef.kind defaults to ClusterTrainingRuntime: pkg/apis/trainer/v1alpha1/trainjob_types.go:174).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.builtin import builtin_runtimes
from kftrain.job.kinds.trainjob.runtime import RUNTIME_KINDS, Runtime, parse_runtime

log = logging.getLogger(__name__)

RUNTIMES_ENV = "KFTRAIN_TRAINER_RUNTIMES"  # runtime files or folders, separated by ":"
_REPLACED_SAID: set[tuple[str, str, str]] = set()  # (source, kind, name): said once a process, not per catalog


@functools.cache
def _builtin() -> dict[tuple[str, str], Runtime]:
    return {(r.kind, r.name): r for r in builtin_runtimes()}


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
        """Add ``runtime``; one of a built-in's kind and name replaces it, and a line says so."""
        key = (runtime.kind, runtime.name)
        builtin = _builtin().get(key)
        if builtin is not None and self._runtimes.get(key) == builtin and runtime.manifest != builtin.manifest:
            said = (runtime.source, *key)
            if said not in _REPLACED_SAID:
                _REPLACED_SAID.add(said)
                log.warning(
                    "%s: %s %r replaces Trainer v2.3.0's built-in one of that name (a cluster has one %s of a name: "
                    "this is taken as the cluster's)",
                    runtime.source,
                    runtime.kind,
                    runtime.name,
                    runtime.kind,
                )
        self._runtimes[key] = runtime

    @classmethod
    def from_paths(
        cls, paths: Iterable[str | Path], *, builtin: bool = True, origin: str = "--runtimes"
    ) -> RuntimeCatalog:
        """Every runtime in the YAML files at ``paths`` (a folder: its ``*.yaml`` and ``*.yml``), given by ``origin``
        (what a message names: the option or the environment variable)."""
        found: list[Runtime] = []
        for path in map(Path, paths):
            # A folder's subfolders are skipped, as kubectl apply -f FOLDER skips them without -R
            # (kubernetes/cli-runtime@v0.36.2:pkg/resource/visitor.go, ExpandPathsToFileVisitors); anything else that
            # is not a regular file (a named pipe, a device) is refused by the reader.
            in_folder = [*path.glob("*.yaml"), *path.glob("*.yml")] if path.is_dir() else None
            files = [path] if in_folder is None else sorted(f for f in in_folder if not f.is_dir())
            if not path.exists():
                raise JobSpecError(origin, f"{path}: no such file or folder")
            for file in files:
                found.extend(_read_runtimes(file))
        return cls(found, builtin=builtin)

    @classmethod
    def from_env(cls) -> RuntimeCatalog:
        """The built-in runtimes, plus those in ``KFTRAIN_TRAINER_RUNTIMES`` (paths separated by ``:``)."""
        paths = [p for p in os.environ.get(RUNTIMES_ENV, "").split(os.pathsep) if p]
        return cls.from_paths(paths, origin=RUNTIMES_ENV)

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
    from kftrain.job.manifest.parse import RUNTIMES, read_yaml_file  # here: kftrain.job.manifest imports the kinds

    # Read as a job manifest is (kftrain.job.manifest.parse): a regular file, bounded in size, aliases and nesting,
    # no repeated key. A folder may hold other manifests next to the runtimes (kustomization.yaml): only runtimes count.
    return runtimes_of(read_yaml_file(path, RUNTIMES), str(path))


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


def bundled_catalog(docs: Sequence[tuple[int, Mapping[str, Any]]], source: str, runtimes: Any) -> RuntimeCatalog:
    """The runtimes a file carries beside the TrainJob (``docs``: each YAML document with its index in ``source``),
    over ``runtimes`` (None: those Trainer installs); anything else in the file is refused."""
    found: list[Runtime] = []
    for i, doc in docs:
        if doc.get("kind") not in RUNTIME_KINDS:
            raise JobSpecError(
                f"{source}#{i}",
                f"{doc.get('kind')}: a TrainJob file holds the job and its TrainingRuntimes or "
                "ClusterTrainingRuntimes only (apply other objects with kubectl)",
            )
        found += [dataclasses.replace(r, bundled=True) for r in runtimes_of([doc], source, first_index=i)]
    base = runtimes if runtimes is not None else RuntimeCatalog()
    return RuntimeCatalog([*base.runtimes(), *found], builtin=False)


def runtime_difference(given: Any, served: Any, path: str) -> str | None:
    """The first field ``given`` sets that ``served`` lacks or holds another value of (None: none); what the API server
    defaulted on its copy (fields the file leaves unset) is not a difference."""
    if isinstance(given, Mapping):
        if not isinstance(served, Mapping):
            return path
        for key, value in given.items():
            if value is None:
                continue
            found = runtime_difference(value, served.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(given, list):
        if not isinstance(served, list) or len(served) != len(given):
            return path
        for i, (a, b) in enumerate(zip(given, served, strict=True)):
            found = runtime_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if given == served or str(given) == str(served) else path

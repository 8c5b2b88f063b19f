"""The runtime catalog: a file's runtime of a built-in's kind and name is taken with one line saying so, however the
file is given (a path, KFTRAIN_TRAINER_RUNTIMES, ``--runtimes``, beside the job); a TrainingRuntime of a built-in's
name, another name, or the built-in's own manifest replace nothing and say nothing."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from kftrain.cli.launch import runtime_catalog
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog, bundled_catalog
from testbed.manifests import as_yaml, training_runtime

CLUSTER, NAMESPACED = "ClusterTrainingRuntime", "TrainingRuntime"
LOGGER = "kftrain.job.kinds.trainjob.catalog"


def _edited_builtin() -> dict[str, Any]:
    runtime = copy.deepcopy(builtin_manifest("torch-distributed"))
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] = "registry.example/torch:site"
    return runtime


# Each case: the runtime in the file; whether it replaces torch-distributed (and a line says so).
CASES = {
    "a ClusterTrainingRuntime named as a built-in": (lambda: training_runtime(name="torch-distributed"), True),
    "a built-in with another image": (_edited_builtin, True),
    "a TrainingRuntime named as a built-in": (
        lambda: training_runtime(name="torch-distributed", kind=NAMESPACED),
        False,
    ),
    "a ClusterTrainingRuntime of its own name": (lambda: training_runtime(name="site-torch"), False),
    "the built-in's own manifest": (lambda: builtin_manifest("torch-distributed"), False),
}


def _by_path(path: Path, monkeypatch) -> RuntimeCatalog:
    return RuntimeCatalog.from_paths([path])


def _by_env(path: Path, monkeypatch) -> RuntimeCatalog:
    monkeypatch.setenv("KFTRAIN_TRAINER_RUNTIMES", str(path))
    return RuntimeCatalog.from_env()


def _by_option(path: Path, monkeypatch) -> RuntimeCatalog:
    import argparse

    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    return runtime_catalog(argparse.Namespace(runtimes=[str(path)]))


def _beside_the_job(path: Path, monkeypatch) -> RuntimeCatalog:
    import yaml

    return bundled_catalog([(1, yaml.safe_load(path.read_text()))], str(path), None)


WAYS = {"path": _by_path, "env": _by_env, "--runtimes": _by_option, "beside the job": _beside_the_job}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("case", CASES)
def test_a_file_replacing_a_builtin_runtime_says_so_once(case, way, tmp_path, caplog, monkeypatch) -> None:
    make, replaces = CASES[case]
    manifest = make()
    path = tmp_path / "runtimes.yaml"
    path.write_text(as_yaml(manifest))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        catalog = WAYS[way](path, monkeypatch)
        WAYS[way](path, monkeypatch)  # a second catalog of the same file: said once
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    served = catalog.find(CLUSTER, "torch-distributed")
    if replaces:
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"{path}") and "ClusterTrainingRuntime 'torch-distributed' replaces" in lines[0]
        assert served.manifest == manifest and str(path) in served.source
    else:
        assert lines == []
        assert served.manifest == builtin_manifest("torch-distributed")

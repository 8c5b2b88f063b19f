"""Shared fixtures: the operators' reference CRDs and examples, and tiny manifest builders."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.job.manifest.schema import CRDSchemas

SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE_DIR = SHARED_DIR / "reference"


def _require(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"reference data not available: {path} is missing (the operators' CRDs and examples)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED_DIR


@pytest.fixture(scope="session")
def crd_schemas(shared_dir: Path) -> CRDSchemas:
    return CRDSchemas.from_dir(_require(shared_dir / "reference" / "crds"))


@pytest.fixture(scope="session")
def example_manifests(shared_dir: Path) -> dict[str, Path]:
    """Official example manifests by file name."""
    folder = _require(shared_dir / "reference" / "examples")
    found = {p.name: p for p in sorted(folder.glob("*.yaml"))}
    if not found:
        pytest.skip(f"reference data not available: no *.yaml in {folder}")
    return found


# --- tiny manifests, as plain dicts ---------------------------------------------------------------

Replicas = Mapping[str, "int | Mapping[str, Any]"]


def container(name: str, command: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "example.com/train:1"}
    if command is not None:
        out["command"] = list(command)
    out.update(fields)
    return out


def replica(
    replicas: int | None = 1,
    container_name: str = "pytorch",
    command: list[str] | None = None,
    restart_policy: str | None = None,
    **container_fields: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if replicas is not None:
        out["replicas"] = replicas
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    out["template"] = {"spec": {"containers": [container(container_name, command, **container_fields)]}}
    return out


def manifest(
    kind: str,
    api_version: str,
    replica_key: str,
    container_name: str,
    replicas: Replicas,
    *,
    name: str = "job",
    **spec: Any,
) -> dict[str, Any]:
    """A manifest whose replica specs are given as a count (a one-container replica) or a full dict."""
    specs = {
        rtype: replica(r, container_name) if isinstance(r, int) else copy.deepcopy(dict(r))
        for rtype, r in replicas.items()
    }
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {replica_key: specs, **copy.deepcopy(spec)},
    }


def tfjob(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return manifest("TFJob", "kubeflow.org/v1", "tfReplicaSpecs", "tensorflow", replicas, **kw)


def pytorchjob(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return manifest("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", "pytorch", replicas, **kw)


def mpijob_v2(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return manifest("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", "mpi", replicas, **kw)


def mpijob_v1(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return manifest("MPIJob", "kubeflow.org/v1", "mpiReplicaSpecs", "mpi", replicas, **kw)


# --- the fake Kubernetes API and its simulated operator ---------------------------------------------


@pytest.fixture
def kube(shared_dir: Path) -> Iterator[Any]:
    """A fake Kubernetes API server on 127.0.0.1 that rejects what the operators' CRD schemas reject."""
    from tests.fake_k8s import FakeKube

    crds = shared_dir / "reference" / "crds"
    if not crds.is_dir():
        pytest.skip(f"the operators' CRDs are needed to validate jobs like the API server; {crds} is missing")
    fake = FakeKube(crds).start()
    yield fake
    fake.stop()


@pytest.fixture
def operator(kube: Any) -> Iterator[Any]:
    """The simulated operator of ``kube``; a scenario that raised fails the test."""
    from tests.fake_k8s import OperatorSim

    sim = OperatorSim(kube)
    yield sim
    sim.join()
    assert not sim.errors, "\n".join(sim.errors)


@pytest.fixture(autouse=True, scope="session")
def local_job_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The local backend records its jobs (``kftrain jobs``) here, not in the home folder of whoever runs the tests."""
    os.environ.setdefault(STATE_DIR_ENV, str(tmp_path_factory.mktemp("kftrain-jobs")))


# The temporary folder of the whole test run, and of every process it starts: each test's tmp_path, the local
# backend's work folders of the failed jobs the tests run on purpose (kept by design, bounded by
# LocalConfig.keep_finished), and what a step killed outright (as a pod dies) could not remove. Removed when the run
# ends, so a test run leaves nothing in the temporary folder; KFTRAIN_TESTS_KEEP_TMP=1 keeps it (and says where).
KEEP_TMP_ENV = "KFTRAIN_TESTS_KEEP_TMP"
_SCRATCH = pytest.StashKey[tuple[str | None, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    scratch = tempfile.mkdtemp(prefix="kftrain-tests-")
    config.stash[_SCRATCH] = (scratch, os.environ.get("TMPDIR"))
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch  # this process's tempfile (and pytest's tmp_path) too


def pytest_unconfigure(config: pytest.Config) -> None:
    scratch, previous = config.stash.get(_SCRATCH, (None, None))
    if scratch is None:
        return
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    tempfile.tempdir = None
    if os.environ.get(KEEP_TMP_ENV):
        print(f"\nthe test run's temporary folder is kept: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)

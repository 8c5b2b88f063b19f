"""Every shared fixture of the suite, for tests/ and the tests beside each component alike (the repository's
conftest.py registers this module as a plugin; nothing imports a fixture by name).

The helpers these fixtures use live in the support modules beside this one: the reference data
(testbed/reference.py), the fake Kubernetes API (testbed/fake_k8s), the local S3 (testbed/s3_server.py), the local
backend's test programs (testbed/local_harness.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
import pytest

from kftrain import redaction
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.job.manifest.schema import CRDSchemas
from testbed import reference
from testbed.local_harness import children, marked
from testbed.s3_server import MotoServer, boto3_client, set_s3_env

# The namespace of the kubeconfig a launch step finds the fake cluster through.
KUBECONFIG_NAMESPACE = "kfp-user"
# A secret's value in the launcher's own environment: it must reach no job, no pod and no output.
CANARY = "canary-7d1e5b-never-print-me"


# A slow test (a whole pipeline, a real distributed job, a fresh venv) may take minutes on a 2-core machine; it
# still ends: past this it fails alone (the default limit of every other test is pyproject.toml's ``timeout``).
SLOW_TIMEOUT_S = 1200


def _shares_a_fixture_with_its_module(item: pytest.Item) -> bool:
    """Whether the test uses a module- or class-scoped fixture (a pipeline run, a job, a server its module's
    tests share): split across workers, each worker would make it again."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in ("module", "class", "package") for defs in info.name2fixturedefs.values())


# First: pytest-xdist reads the groups in its own hook of this name (--dist loadgroup).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every slow test without a limit of its own gets :data:`SLOW_TIMEOUT_S`; the tests of a module that share a
    module-scoped fixture run on one worker (an explicit ``xdist_group`` mark wins)."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        if not item.get_closest_marker("xdist_group") and _shares_a_fixture_with_its_module(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))


@pytest.fixture(autouse=True, scope="session")
def local_job_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The local backend records its jobs (``kftrain jobs``) here, not in the home folder of whoever runs the tests."""
    os.environ.setdefault(STATE_DIR_ENV, str(tmp_path_factory.mktemp("kftrain-jobs")))


@pytest.fixture(autouse=True)
def secrets_of_this_test() -> Iterator[None]:
    """A secret a test registers (``--token wrong``) is forgotten after it: ``redact`` in a later test of the same
    worker must not mask that word in its own output."""
    with redaction.lock:
        before = set(redaction.registered)
    yield
    with redaction.lock:
        redaction.registered.intersection_update(before)


# --- the operators' reference data -------------------------------------------------------------------


@pytest.fixture(scope="session")
def crd_schemas() -> CRDSchemas:
    """The operators' CRD schemas (:func:`testbed.reference.crd_schemas`)."""
    return reference.crd_schemas()


@pytest.fixture(scope="session")
def example_manifests() -> dict[str, Path]:
    """Official example manifests by file name."""
    folder = reference.required(reference.EXAMPLES_DIR)
    found = {p.name: p for p in sorted(folder.glob("*.yaml"))}
    if not found:
        pytest.skip(f"reference data not available: no *.yaml in {folder}")
    return found


# --- the fake Kubernetes API, its simulated operator, and a step that finds it ----------------------


@pytest.fixture
def kube() -> Iterator[Any]:
    """A fake Kubernetes API server on 127.0.0.1 that rejects what the operators' CRD schemas reject."""
    from testbed.fake_k8s import FakeKube

    fake = FakeKube(reference.required(reference.CRD_DIR)).start()
    yield fake
    fake.stop()


@pytest.fixture
def operator(kube: Any) -> Iterator[Any]:
    """The simulated operator of ``kube``; a scenario that raised fails the test."""
    from testbed.fake_k8s import OperatorSim

    sim = OperatorSim(kube)
    yield sim
    sim.join()
    assert not sim.errors, "\n".join(sim.errors)


@pytest.fixture
def virtual_clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Kubernetes backend's wait on a clock that moves only when the test advances it (testbed/clock.py): its
    pending timeout passes when the scenario says, whatever the machine's load, and costs no real time."""
    from kftrain.backends.kubernetes import backend
    from testbed.clock import VirtualClock

    clock = VirtualClock()
    monkeypatch.setattr(backend, "CLOCK", clock)
    return clock


@pytest.fixture
def sigterm_outside_the_step() -> Iterator[list[int]]:
    """SIGTERM outside a launch step's wait is recorded instead of ending the test run (the step installs its own
    handler for its wait, and puts this one back after)."""
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, record)
    yield received
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def kubeconfig(kube: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig whose current context is ``kube``, named by ``KUBECONFIG``; not in a pod, in KFP.

    The launcher's environment also holds a secret's value (:data:`CANARY`) under the names a platform
    gives secrets, so that a test can show it goes nowhere.
    """
    path: Path = kube.write_kubeconfig(tmp_path / "kubeconfig", KUBECONFIG_NAMESPACE, user="pipeline-runner")
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no in-cluster configuration
    monkeypatch.setenv("KFP_POD_NAME", "launch-step-a")
    monkeypatch.setenv("KFP_POD_UID", "uid-a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    return path


# --- object storage: the session's moto S3 --------------------------------------------------------


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """One moto server for the session (tests that restart it start their own)."""
    with MotoServer() as server:
        yield server


@pytest.fixture
def s3_env(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket on the session's moto server, the environment pointing at it; yields ``s3://bucket``."""
    set_s3_env(monkeypatch, moto.endpoint)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3_client(moto.endpoint).create_bucket(Bucket=bucket)
    yield f"s3://{bucket}"
    with contextlib.suppress(Exception):
        client = boto3_client(moto.endpoint)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real MLflow tracking server for the module's tests (testbed/mlflow_server.py), stopped after them; skips,
    naming the install script, where the server is not installed."""
    from testbed.mlflow_server import INSTALL, MLFLOW, mlflow_server
    from testbed.needs import require

    require("mlflow", reason="kftrain's [mlflow] extra (make install)")
    if not MLFLOW.exists():
        pytest.skip(f"no MLflow tracking server at {MLFLOW} ({INSTALL})")
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server


# --- processes: what a test started, it stops ------------------------------------------------------


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    """Every process the test started has ended when it ends (the rest are killed, and the test fails).

    Only what the test started counts: session servers (the S3 server) outlive single tests."""
    before = children()
    yield
    left = sorted(children() - before, key=lambda proc: proc.pid)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert left == [], f"processes left behind: {left}"


@pytest.fixture
def no_process_started() -> Iterator[None]:
    """Nothing the test does may leave (or even start) a process."""
    before = {p.pid for p in children()}
    yield
    after = [p for p in children() if p.pid not in before]
    assert after == [], f"processes started: {after}"


@pytest.fixture
def mark() -> Iterator[str]:
    """A marker for the environment of every process a test starts (:func:`marked`); none may outlive it."""
    value = uuid.uuid4().hex
    yield value
    left = marked(value)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert left == [], f"orphans: {left}"


@pytest.fixture
def clean_parent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Contract variables in the launching shell, which must never reach a replica."""
    for name, value in {
        "RANK": "99",
        "WORLD_SIZE": "99",
        "LOCAL_RANK": "5",
        "TF_CONFIG": '{"cluster":{}}',
        "MASTER_ADDR": "evil.example",
        "PET_NNODES": "42",
        "K_MPI_JOB_ROLE": "worker",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """A folder the local backend's test programs write what they saw into (``OUT_DIR``)."""
    path = tmp_path / "out"
    path.mkdir()
    return path


# --- components: KFP's local runner, and a trained model to evaluate and export ---------------------


@pytest.fixture
def kfp_local(tmp_path: Path) -> Path:
    """KFP's local runner as ``kftrain run`` uses it: a component (or pipeline) called now runs, each step a
    subprocess of this environment; returns the pipeline root its outputs are written under."""
    from kftrain.cli.run import init_local_runner

    return init_local_runner(tmp_path / "pipeline-root")


@pytest.fixture(scope="session")
def breast_cancer(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Any]:
    """(model URI, dataset URI, model): scikit-learn's breast cancer data (binary, 30 features) prepared as a
    dataset, and a TorchScript logistic regression trained on its train split, saved as the model contract says.
    Read it; write elsewhere."""
    from torch import nn

    from kftrain.data.dataset import load_split
    from kftrain.models import save_model
    from testbed.bundled import fit_linear, prepared_breast_cancer

    tmp = tmp_path_factory.mktemp("breast-cancer")
    dataset = prepared_breast_cancer(tmp)
    x, y = load_split(dataset, "train")
    model = fit_linear(x, y, 2, nn.CrossEntropyLoss())
    save_model(model, str(tmp / "model"), example_input=x[:2])
    return str(tmp / "model"), dataset, model


@pytest.fixture(scope="session")
def finetuned_llm(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(model URI, dataset URI): a micro Llama LoRA-tuned on 12 examples of the synthetic task, written as the
    fine-tuning program writes its output, and the instruction dataset of them (:func:`testbed.llm_models.
    finetuned_case`). Read it; write elsewhere."""
    from testbed.llm_models import finetuned_case

    return finetuned_case(tmp_path_factory.mktemp("finetuned-llm"))


# The temporary folder of the whole test run, and of every process it starts: each test's tmp_path, the local
# backend's work folders of the failed jobs the tests run on purpose (kept by design, bounded by
# LocalConfig.keep_finished), and what a step killed outright (as a pod dies) could not remove. Removed when the run
# ends, so a test run leaves nothing in the temporary folder; KFTRAIN_TESTS_KEEP_TMP=1 keeps it (and says where).
KEEP_TMP_ENV = "KFTRAIN_TESTS_KEEP_TMP"
_SCRATCH = pytest.StashKey[tuple[str | None, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers its mark; without it (-p no:xdist) --strict-markers would refuse the modules using it.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one pytest-xdist worker")
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


# --- what a test needs installed, probed once per session when a test asks ------------------------------


@pytest.fixture(scope="session")
def horovod_torch() -> None:
    """Skips the test unless Horovod is installed with PyTorch and MPI (scripts/build_horovod.sh)."""
    from testbed.needs import horovod_frameworks

    if not horovod_frameworks()[0]:
        pytest.skip("Horovod with PyTorch+MPI not installed (scripts/build_horovod.sh)")


@pytest.fixture(scope="session")
def horovod_tf() -> None:
    """Skips the test unless Horovod was built with TensorFlow (TensorFlow present when it was built)."""
    from testbed.needs import horovod_frameworks

    if not horovod_frameworks()[1]:
        pytest.skip("Horovod was built without TensorFlow (TensorFlow missing when it was built)")

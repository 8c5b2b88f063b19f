"""Every shipped pipeline, end to end, as KFP's backend runs it: the oldest (2.5) and newest (2.17) releases.

Each run goes through testbed/kfp_backend: the driver resolves every task, the platform config is parsed against
the release's proto and applied to each task pod, the launcher moves the artifacts and runs the step's own
container command with the pod's environment (no AWS variables: a step finds the store from the namespace's
kfp-launcher ConfigMap), and each training job is created on the fake Kubernetes API and run by the simulated
operator with kftrain's local backend. Few epochs and a low gate: the point is the wiring.

Each pipeline trains for real once, on the newest release: its own program reads the dataset from the store and
writes the model there. Every other run checks what differs between releases or settings (the driver, the
platform config, the launcher's artifact moves, the job's name and labels), which the training does not touch:
its pods run the stub trainer (testbed/programs/stub_trainer.py: a linear model of the pipeline's framework,
written in this release's format in a few seconds, with a checkpoint beside it), so evaluation and export
still run on a real model, and the job is created exactly as the real program's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kftrain.job.naming import RUN_ID_ANNOTATION, TASK_ID_ANNOTATION
from testbed import REPO_ROOT
from testbed.kfp_backend.cluster import cluster_for
from testbed.kfp_backend.runner import Cluster, RunResult, run_pipeline
from testbed.kfp_backend.versions import NEWEST, OLDEST
from testbed.pipeline_harness import stub_trainer

REPO = REPO_ROOT
QUICK = {"epochs": 2, "gate_threshold": 0.3}
PLATFORM = {"node_selector": {"pool": "cpu"}, "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
PIPELINES = {
    "pytorch_digits": QUICK,
    "tf_digits": QUICK,
    "tf_digits_ps": QUICK,
    "horovod_digits": QUICK,
    "pytorch_digits_trainjob": QUICK,
    "horovod_digits_trainjob": QUICK,
    "train_evaluate_export": {"gate_threshold": 0.3},
}
# The framework of each pipeline's model: the format the stub trainer writes in its place.
FRAMEWORK = {
    "pytorch_digits": "pytorch",
    "tf_digits": "tensorflow",
    "tf_digits_ps": "tensorflow",
    "horovod_digits": "pytorch",
    "pytorch_digits_trainjob": "pytorch",
    "horovod_digits_trainjob": "pytorch",
    "train_evaluate_export": "pytorch",  # its default job kind, PyTorchJob, runs this release's PyTorch program
}
# The release each pipeline trains for real on; on every other, its pods run the stub trainer.
TRAINS_ON = NEWEST


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_for(request.param, tmp_path)


def stubbed(cluster: Cluster, name: str) -> Cluster:
    """``cluster`` with its training pods running the stub trainer of ``name``'s framework."""
    cluster.program = stub_trainer(FRAMEWORK[name])
    return cluster


def run(cluster: Cluster, name: str, **params: Any) -> RunResult:
    return run_pipeline(cluster, REPO / "pipelines" / "training" / name / "pipeline.yaml", params)


def check_run(cluster: Cluster, result: RunResult) -> None:
    """Every step ran with the pod KFP gives it; the job is named and labelled from the backend's real ids."""
    exports = [t for name, t in result.tasks.items() if name.endswith("export-model")]
    assert exports and all(t.triggered for t in exports), sorted(result.tasks)
    for name, task in result.tasks.items():
        env = task.record.env
        assert env["KFP_POD_NAME"] and env["KFP_POD_UID"], name
        assert not any(k.startswith("AWS_") for k in env), f"{name}: the store's credentials came from the pod env"
    pods = [p for (ns, n), p in cluster.kube.pods.items() if "system-container-impl" in n]
    assert pods and all(p["spec"]["nodeSelector"] == PLATFORM["node_selector"] for p in pods)
    assert all(p["spec"]["tolerations"] == PLATFORM["tolerations"] for p in pods)
    assert len(cluster.jobs) == 1
    annotations = cluster.jobs[0]["metadata"]["annotations"]
    assert annotations[RUN_ID_ANNOTATION] == result.run_id
    launch = next(n for n in result.tasks if n.split("/")[-1].endswith("-launch"))
    salt = next(iter(result.tasks[launch].record.executor_input["outputs"]["artifacts"].values()))["artifacts"][0]
    assert annotations[TASK_ID_ANNOTATION] == f"{launch.split('/')[-1]}/{salt['uri'].split('/')[-2]}"
    # The program that ran is the one the run meant: the job's own, or the stub in its place.
    launched = (cluster.workdir / "jobs" / cluster.jobs[0]["metadata"]["name"] / "launch.log").read_text()
    assert ("stub trainer: wrote a linear" in launched) == bool(cluster.program), launched[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [OLDEST, NEWEST], ids=str, indirect=True)
@pytest.mark.parametrize("name", list(PIPELINES))
def test_shipped_pipeline_runs_on_the_backend(cluster: Cluster, name: str) -> None:
    if cluster.backend != TRAINS_ON:
        stubbed(cluster, name)
    result = run(cluster, name, **PIPELINES[name], **PLATFORM)
    check_run(cluster, result)


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [OLDEST], ids=str, indirect=True)
def test_an_empty_storage_secret_runs(cluster: Cluster) -> None:
    """No step pod's config names the secret, so KFP's driver has no empty name to refuse; the replicas get no
    secret (the launch input's "empty: none") and reach the store by the nodes' own identity."""
    from testbed.s3_server import ACCESS_KEY, SECRET_KEY

    cluster.workload_identity = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    result = run(stubbed(cluster, "pytorch_digits"), "pytorch_digits", **QUICK, **PLATFORM, storage_secret="")
    check_run(cluster, result)
    assert "secretKeyRef" not in str(cluster.jobs[0]["spec"])


def downloaded(result: RunResult, task_suffix: str, artifact: str) -> int:
    task = next(t for n, t in result.tasks.items() if n.endswith(task_suffix))
    return int(task.record.downloaded_bytes.get(artifact, 0))


@pytest.fixture(scope="module")
def stubbed_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    """One run of pytorch_digits on the release ``request.param`` with the stub trainer, for the tests that read
    what its task pods downloaded (the same whatever the training program: it reads the dataset by URI)."""
    for cluster in cluster_for(request.param, tmp_path_factory.mktemp("backend")):
        yield run(stubbed(cluster, "pytorch_digits"), "pytorch_digits", **QUICK, **PLATFORM)


@pytest.mark.slow
@pytest.mark.parametrize("stubbed_run", [NEWEST], ids=str, indirect=True)
def test_evaluation_and_export_download_only_the_model(stubbed_run: RunResult) -> None:
    for step in ("evaluate-model", "export-model"):
        assert downloaded(stubbed_run, step, "dataset") == 0, step


@pytest.mark.slow
@pytest.mark.parametrize("stubbed_run", [NEWEST], ids=str, indirect=True)
def test_the_launch_step_downloads_no_dataset(stubbed_run: RunResult) -> None:
    assert downloaded(stubbed_run, "pytorchjob-launch", "dataset") == 0

"""A TrainJob's manifest with its runtime beside it, and the progress its nodes report to Kubeflow Trainer, through the
trainjob launch component on the Kubernetes backend (the fake API server of testbed/fake_k8s and a simulated Trainer).

The decision tested here (kftrain/job/kinds/trainjob/kind.py, ``cluster_dependency``): a namespaced TrainingRuntime
the file carries is created in the job's namespace when it has none of that name, else it must match the file's; it
is never replaced. A ClusterTrainingRuntime the file carries must already be on the cluster, and match.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.launch_cluster import KfpMetrics, start, step_output, succeed, until_step_says

NAMESPACE = "kubeflow-user"


def runtime(kind: str = "TrainingRuntime", name: str = "team-torch") -> dict[str, Any]:
    manifest = builtin_manifest("torch-distributed")
    manifest["kind"] = kind
    manifest["metadata"] = {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}}
    return manifest


def manifest(rt: dict[str, Any]) -> str:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bundled"},
        "spec": {
            "runtimeRef": {"kind": rt["kind"], "name": rt["metadata"]["name"]},
            "trainer": {"numNodes": 2, "image": "me/train:1", "command": ["python", "train.py"]},
        },
    }
    return yaml.safe_dump_all([rt, job], sort_keys=False)


def run_step(text: str, tmp_path: Path) -> KfpMetrics:
    metrics = KfpMetrics(uri=str(tmp_path / "outputs" / "metrics"), metadata={})
    trainjob_launch.python_func(
        dataset_uri=str(tmp_path / "dataset"),
        model=SimpleNamespace(uri=str(tmp_path / "model"), metadata={}),
        job=str(tmp_path / "outputs" / "job"),
        metrics=metrics,
        curves=SimpleNamespace(uri=str(tmp_path / "outputs" / "curves"), metadata={}, path=""),
        run_id="run-1",
        task_id="task-1",
        backend="kubernetes",
        manifest=text,
        timeout_seconds=60,
    )
    return metrics


def reports_progress(sim: JobSim) -> None:
    """The nodes post their progress twice (what the status server applies), then the job succeeds. The step's line
    is said at once for the first report, then at most every 10 s, and once more at the end."""
    start(sim)
    for pct, loss in ((40, "0.5"), (100, "0.125")):
        metrics = [{"name": "loss", "value": loss}, {"name": "accuracy", "value": "0.9"}]
        sim.trainer_status({"progressPercentage": pct, "estimatedRemainingSeconds": 100 - pct, "metrics": metrics,
                            "lastUpdatedTime": "2026-11-26T10:00:00Z"})  # fmt: skip
        if pct == 40:
            until_step_says(sim, "progress: 40%")
    succeed(sim)


@pytest.fixture
def cluster(kube: FakeKube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    monkeypatch.setenv("KFTRAIN_TRAINER_RUNTIMES", "")
    return kube


def test_a_runtime_the_file_carries_is_created_and_the_nodes_progress_reaches_the_step(
    cluster: FakeKube, operator: OperatorSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    operator.scenario = reports_progress
    metrics = run_step(manifest(runtime()), tmp_path)
    created = cluster.runtimes[("trainingruntimes", cluster_namespace(cluster), "team-torch")]
    assert created["spec"] == runtime()["spec"]
    out = capsys.readouterr().out
    assert "created TrainingRuntime team-torch" in out
    assert "progress: 40% loss 0.5 accuracy 0.9 | eta 1m00s (trainer status)" in out
    assert "progress: 100% loss 0.125 accuracy 0.9 | eta 0s (trainer status)" in out
    # The KFP Metrics output: the last status, its metrics under their own names.
    assert metrics.metadata == {"loss": 0.125, "accuracy": 0.9, "progress_percentage": 100.0}
    assert step_output  # (the helper is shared with test_launch_kubernetes)


def cluster_namespace(kube: FakeKube) -> str:
    (job,) = kube.jobs_of("trainjobs")
    return str(job["metadata"]["namespace"])


@pytest.mark.parametrize("same", [True, False], ids=["same: used", "different: refused"])
def test_a_runtime_already_there_must_match_the_files(
    cluster: FakeKube, operator: OperatorSim, tmp_path: Path, same: bool
) -> None:
    from testbed.launch_cluster import expected_namespace

    there = runtime()
    if not same:
        there["spec"]["mlPolicy"]["numNodes"] = 3
    cluster.runtimes[("trainingruntimes", expected_namespace(), "team-torch")] = copy.deepcopy(there)
    operator.scenario = lambda sim: (start(sim), succeed(sim))
    if same:
        run_step(manifest(runtime()), tmp_path)
        assert len(cluster.jobs_of("trainjobs")) == 1
        return
    with pytest.raises(SystemExit):
        run_step(manifest(runtime()), tmp_path)
    assert cluster.jobs_of("trainjobs") == []  # refused before anything was created
    assert cluster.runtimes[("trainingruntimes", expected_namespace(), "team-torch")] == there  # never replaced


def test_a_cluster_runtime_the_file_carries_must_be_there_already(
    cluster: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        run_step(manifest(runtime("ClusterTrainingRuntime", "not-installed")), tmp_path)
    err = capsys.readouterr()
    assert "the cluster has no ClusterTrainingRuntime named 'not-installed'" in err.out + err.err
    assert "a cluster administrator applies it first" in err.out + err.err
    assert cluster.jobs_of("trainjobs") == []


def test_two_jobs_in_one_file_are_refused() -> None:
    from kftrain.job import load_manifest

    job = yaml.safe_load(manifest(runtime()).split("---")[1])
    with pytest.raises(JobSpecError, match="expected exactly one job among its 3 YAML documents"):
        load_manifest(yaml.safe_dump_all([runtime(), job, job]))
    with pytest.raises(JobSpecError, match=r"<manifest>#0.*Secret: a TrainJob file holds the job and its"):
        load_manifest(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}, job]))

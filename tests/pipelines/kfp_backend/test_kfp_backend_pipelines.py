"""Every shipped pipeline, end to end, as KFP's backend runs it: the oldest (2.5) and newest (2.17) releases.

Each pipeline trains for real once, on the newest release; every other run checks what differs between releases
or settings, its pods running the stub trainer. How a run goes through testbed/kfp_backend is in the comment
below the imports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.job.naming import RUN_ID_ANNOTATION, TASK_ID_ANNOTATION
from testbed import REPO_ROOT
from testbed.fake_k8s import JobSim
from testbed.fake_k8s.operator import JobGone
from testbed.kfp_backend.cluster import PATH_STYLE, cluster_for
from testbed.kfp_backend.pod_process import Cancel, StepCancelled
from testbed.kfp_backend.runner import PIPELINE_ROOT, Cluster, RunResult, run_pipeline
from testbed.kfp_backend.store import Bucket
from testbed.kfp_backend.versions import BACKENDS, NEWEST, OLDEST
from testbed.pipeline_harness import stub_llm_trainer, stub_trainer
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer

# Each run goes through testbed/kfp_backend: the driver resolves every task, the platform config is parsed against
# the release's proto and applied to each task pod, the launcher moves the artifacts and runs the step's own
# container command with the pod's environment (no AWS variables: a step finds the store from the namespace's
# kfp-launcher ConfigMap), and each training job is created on the fake Kubernetes API and run by the simulated
# operator with kftrain's local backend. Few epochs and a low gate: the point is the wiring.
#
# Each pipeline trains for real once, on the newest release: its own program reads the dataset from the store and
# writes the model there. Every other run checks what differs between releases or settings (the driver, the
# platform config, the launcher's artifact moves, the job's name and labels), which the training does not touch:
# its pods run the stub trainer (testbed/programs/stub_trainer.py: a linear model of the pipeline's framework,
# written in this release's format in a few seconds, with a checkpoint beside it; for the fine-tuning pipeline
# testbed/programs/stub_llm_trainer.py: an untrained tiny Llama in the fine-tuning program's layout), so evaluation
# and export still run on a real model, and the job is created exactly as the real program's.


REPO = REPO_ROOT
QUICK: dict[str, Any] = {"epochs": 2, "gate_threshold": 0.3}
# The fine-tuning's quick run: one epoch of the tiny Llama on the synthetic task, the answers of the held-out examples
# cut at the longest response (3 to 7 letters: kftrain/llm/synthetic.py), no base model evaluated beside it, and a
# gate any model passes (exact match >= 0): the point is the wiring, not what one epoch learns.
LLM_QUICK: dict[str, Any] = {"epochs": 1, "gate_threshold": 0.0, "compare_base": False, "max_new_tokens": 8}
PLATFORM: dict[str, Any] = {
    "node_selector": {"pool": "cpu"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
}


@dataclass(frozen=True)
class Shipped:
    """A shipped pipeline as this module runs it: its folder under pipelines/, its quick parameters, the program its
    training pods run in place of the real one on the releases it does not train on, and the task that exports."""

    folder: str
    params: dict[str, Any]
    stub: list[str]
    export: str = "export-model"


# The stub of each pipeline writes its model in the format of the pipeline's framework: train_evaluate_export's
# default job kind, PyTorchJob, runs this release's PyTorch program.
PIPELINES = {
    "pytorch_digits": Shipped("training", QUICK, stub_trainer("pytorch")),
    "tf_digits": Shipped("training", QUICK, stub_trainer("tensorflow")),
    "tf_digits_ps": Shipped("training", QUICK, stub_trainer("tensorflow")),
    "horovod_digits": Shipped("training", QUICK, stub_trainer("pytorch")),
    "pytorch_digits_trainjob": Shipped("training", QUICK, stub_trainer("pytorch")),
    "horovod_digits_trainjob": Shipped("training", QUICK, stub_trainer("pytorch")),
    "train_evaluate_export": Shipped("training", {"gate_threshold": 0.3}, stub_trainer("pytorch")),
    "llm_finetune": Shipped("llm", LLM_QUICK, stub_llm_trainer(), export="export-language-model"),
}
# What the folder each export's InferenceService serves holds, by the manifest's modelFormat: a file of each name
# (a name starting with "." is a suffix).
SERVED = {
    "triton": ("config.pbtxt",),
    "tensorflow": ("saved_model.pb",),
    "huggingface": ("config.json", ".safetensors", "tokenizer.json", "generation_config.json"),
}
# The release each pipeline trains for real on; on every other, its pods run the stub trainer.
TRAINS_ON = NEWEST


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_for(request.param, tmp_path)


def stubbed(cluster: Cluster, name: str) -> Cluster:
    """``cluster`` with its training pods running the stub trainer of ``name``."""
    cluster.program = PIPELINES[name].stub
    return cluster


def run(cluster: Cluster, name: str, *, cancel: Cancel | None = None, **params: Any) -> RunResult:
    package = REPO / "pipelines" / PIPELINES[name].folder / name / "pipeline.yaml"
    return run_pipeline(cluster, package, params, cancel=cancel)


def check_run(cluster: Cluster, result: RunResult, export: str = "export-model") -> None:
    """Every step ran with the pod KFP gives it; the job is named and labelled from the backend's real ids; the
    evaluation's verdict let the ``export`` task run."""
    exports = [t for name, t in result.tasks.items() if name.endswith(export)]
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
    assert ("stub trainer: wrote a" in launched) == bool(cluster.program), launched[-3000:]


def check_export(cluster: Cluster, result: RunResult, export: str) -> None:
    """The verdict the gate read passed; the export's InferenceService, in the run's store, serves a folder of the
    export holding its format's files."""
    verdicts = [t.output_parameters["passed"] for t in result.tasks.values() if "passed" in t.output_parameters]
    assert verdicts == [True], verdicts
    task = next(t for n, t in result.tasks.items() if n.endswith(export))
    exported = task.output_artifacts["exported"][0]["uri"]
    service_uri = task.output_artifacts["inference_service"][0]["uri"]
    bucket = cluster.store_at(cluster.run_session().endpoint)
    body = bucket.client.get_object(Bucket=bucket.name, Key=bucket.key_of(service_uri)[1])["Body"].read()
    service = next(yaml.safe_load_all(body))
    assert service["kind"] == "InferenceService", service
    model = service["spec"]["predictor"]["model"]
    served = model["storageUri"]
    _, served_key = bucket.key_of(served)
    assert served_key.startswith(bucket.key_of(exported)[1].rstrip("/") + "/"), (served, exported)
    names = [obj["Key"].rsplit("/", 1)[-1] for obj in bucket.objects(bucket.name, served_key.rstrip("/") + "/")]
    for wanted in SERVED[model["modelFormat"]["name"]]:
        assert any(n.endswith(wanted) if wanted.startswith(".") else n == wanted for n in names), (wanted, names)


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [OLDEST, NEWEST], ids=str, indirect=True)
@pytest.mark.parametrize("name", list(PIPELINES))
def test_shipped_pipeline_runs_on_the_backend(cluster: Cluster, name: str) -> None:
    if cluster.backend != TRAINS_ON:
        stubbed(cluster, name)
    result = run(cluster, name, **PIPELINES[name].params, **PLATFORM)
    check_run(cluster, result, PIPELINES[name].export)
    check_export(cluster, result, PIPELINES[name].export)


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


@dataclass
class StubbedRun:
    result: RunResult
    bucket: Bucket


@pytest.fixture(scope="module")
def stubbed_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StubbedRun]:
    """One run of pytorch_digits on the release ``request.param`` with the stub trainer, for the tests that read
    what its task pods downloaded (the same whatever the training program: it reads the dataset by URI)."""
    for cluster in cluster_for(request.param, tmp_path_factory.mktemp("backend")):
        yield StubbedRun(run(stubbed(cluster, "pytorch_digits"), "pytorch_digits", **QUICK, **PLATFORM), cluster.bucket)


def stored_bytes(bucket: Bucket, prefix_uri: str) -> int:
    _, key = bucket.key_of(prefix_uri)
    return sum(int(obj["Size"]) for obj in bucket.objects(bucket.name, key))


@pytest.mark.slow
@pytest.mark.parametrize("stubbed_run", [OLDEST, NEWEST], ids=str, indirect=True)
def test_evaluation_and_export_download_only_the_model(stubbed_run: StubbedRun) -> None:
    """Before 2.17 the launcher copies every key that merely starts with an input's key: the model's output is
    recorded as a folder (``.../model/``), so its siblings (the job's checkpoints, logs, TensorBoard files) stay
    out of the pods that take the model."""
    result, bucket = stubbed_run.result, stubbed_run.bucket
    launch = next(t for n, t in result.tasks.items() if n.endswith("pytorchjob-launch"))
    model_uri = launch.output_artifacts["model"][0]["uri"]
    assert model_uri.endswith("/model/"), model_uri
    siblings = stored_bytes(bucket, model_uri.rstrip("/")) - stored_bytes(bucket, model_uri)
    assert siblings > 0, "the job left nothing beside its model: nothing to keep out"
    for step in ("evaluate-model", "export-model"):
        assert downloaded(result, step, "dataset") == 0, step
        assert downloaded(result, step, "model") == stored_bytes(bucket, model_uri) > 0, step


@pytest.mark.slow
@pytest.mark.parametrize("stubbed_run", [NEWEST], ids=str, indirect=True)
def test_the_launch_step_downloads_no_dataset(stubbed_run: StubbedRun) -> None:
    assert downloaded(stubbed_run.result, "pytorchjob-launch", "dataset") == 0


# -- the release manifests' kfp-launcher ConfigMap: defaultPipelineRoot alone -------------------------------


@pytest.fixture
def default_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A namespace whose kfp-launcher ConfigMap names no store, with a Service of its own named minio-service:
    every pod has MINIO_SERVICE_SERVICE_HOST/PORT, and a second store answers there (at its cluster IP, the
    address this machine serves it at)."""
    with MotoServer(env=PATH_STYLE) as other:
        for cluster in cluster_for(request.param, tmp_path, providers=False):
            local = other.endpoint.split("://", 1)[1]
            cluster.stores[local] = Bucket(PIPELINE_ROOT, other.endpoint, ACCESS_KEY, SECRET_KEY)
            cluster.stores[local].create()
            cluster.services["minio-service"] = local
            yield cluster


@pytest.mark.slow
@pytest.mark.parametrize(
    "default_cluster", [BACKENDS["2.14"], BACKENDS["2.15"], BACKENDS["2.17"]], ids=str, indirect=True
)
def test_a_configmap_without_providers_runs_on_the_releases_default_store(default_cluster: Cluster) -> None:
    """Every step reaches the store the run's launcher uses: before 2.15 the namespace's minio-service, at 2.15
    minio-service.kubeflow:9000 whatever the namespace holds, from 2.16 seaweedfs.kubeflow:9000."""
    cluster = default_cluster
    result = run(stubbed(cluster, "pytorch_digits"), "pytorch_digits", **QUICK, **PLATFORM)
    check_run(cluster, result)
    used = cluster.store_at(cluster.run_session().endpoint)
    run_folder = result.run_dir + "/"
    prep = next(t for n, t in result.tasks.items() if n.endswith("prepare-dataset"))
    dataset_uri = prep.output_artifacts["dataset"][0]["uri"]
    assert stored_bytes(used, dataset_uri) > 0, "the dataset is not in the run's store"
    for other in cluster.stores.values():
        if other is not used:
            assert stored_bytes(other, run_folder) == 0, f"a step wrote to {other.endpoint}, not the run's store"


# -- a cancelled run ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [NEWEST], ids=str, indirect=True)
def test_a_cancelled_run_deletes_its_job(cluster: Cluster) -> None:
    """Cancelling a run sends the launch step's process SIGTERM, through the emissary's signal to the launcher's
    process group, and kills it within a second (testbed/kfp_backend/pod_process.py): the step deletes its job in
    that time. Should it lose that race (the emissary's poll can come at once), the job is owned by the launch
    pod, which Argo deletes with the workflow (KFP 2.17.0's manifests: ttlStrategy.secondsAfterCompletion 3600,
    kubeflow/pipelines@2.17.0:manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml:
    50-55; the pods are the workflow's, argoproj/argo-workflows@v4.0.5:workflow/controller/workflowpod.go:211-213),
    so Kubernetes' garbage collector removes the job then."""
    cancel = Cancel()
    deleted: list[float] = []

    def running_until_deleted(sim: JobSim) -> None:
        sim.create_pods()
        sim.start()
        sim.condition("Running")
        sim.log(sim.labels()[0], "step 1")
        until_the_step_says(cluster, sim, "step 1")  # the step is waiting on its job
        cancel.set()
        try:
            sim.wait_deleted(timeout=60)
        except JobGone:
            deleted.append(time.monotonic())
            raise

    cluster.job_scenario = running_until_deleted
    with pytest.raises(StepCancelled):
        run(cluster, "pytorch_digits", cancel=cancel, **QUICK, **PLATFORM)
    (job,) = cluster.jobs
    assert [d[2] for d in cluster.kube.deletions] == [job["metadata"]["name"]]
    assert deleted and cancel.sigterm_at is not None
    assert deleted[0] - cancel.sigterm_at < cancel.grace_s, "the job outlived the step's process"
    logs = [p.read_text(errors="replace") for p in cluster.workdir.glob("*/main.log")]
    # KFP's launcher pipes the step's output and exits on that SIGTERM (pod_process._LauncherPipe): what the step
    # streamed before is in its log, its own last line is lost, as in a real run.
    assert any("step 1" in log for log in logs) and not any("terminated (run" in log for log in logs), logs
    pods = {p["metadata"]["uid"]: name for (_, name), p in cluster.kube.pods.items()}
    owners = [(o["kind"], pods.get(o["uid"], "")) for o in job["metadata"].get("ownerReferences", [])]
    assert len(owners) == 1 and owners[0][0] == "Pod" and "system-container-impl" in owners[0][1], owners


def until_the_step_says(cluster: Cluster, sim: JobSim, text: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not any(text in p.read_text(errors="replace") for p in cluster.workdir.glob("*/main.log")):
        assert time.monotonic() < end, f"no step said {text!r} within {timeout:g} s"
        sim.sleep(0.05)

"""A TrainJob on the Kubernetes backend, against the fake API server and a simulated Trainer + JobSet.

The simulated controller creates the JobSet's pods as JobSet labels them (``jobset.sigs.k8s.io/jobset-name``,
``jobset.sigs.k8s.io/replicatedjob-name``, and the Indexed Job's ``batch.kubernetes.io/job-completion-index``)
and moves the TrainJob through Trainer v2's conditions: Created, Suspended, then Complete or Failed. The table:
success, failure with the failing node's log tail, an image that cannot be pulled (pending), Kueue's webhook
suspending the TrainJob until Kueue admits it; then a relaunched step reattaching, and SIGTERM deleting it.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kftrain.backends.base import JobPhase
from kftrain.backends.kubernetes import KubernetesConfig
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.job import TrainingJob, load_manifest
from kftrain.job.naming import stamp_run_identity
from kftrain.retry import RetryPolicy
from tests.fake_k8s import FakeKube, JobSim, OperatorSim, kueue_webhook
from tests.launch_harness import kfp_outputs

REPO_ROOT = Path(__file__).resolve().parents[1]
RUN_ID, TASK_ID = "run-1", "task-1"


def trainjob(name: str = "digits", nodes: int = 2, **metadata: Any) -> TrainingJob:
    return load_manifest(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, **metadata},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"numNodes": nodes, "image": "example.com/train:1", "command": ["torchrun", "t.py"]},
            },
        }
    )


def make_backend(kube: FakeKube, **overrides: Any) -> tuple[KubernetesBackend, io.StringIO]:
    out = io.StringIO()
    values: dict[str, Any] = dict(
        namespace="default",
        poll_interval_s=0.05,
        watch_window_s=1,
        log_drain_s=1.0,
        pending_timeout_s=0.5,
        retry=RetryPolicy(attempts=6, initial_s=0.02, max_s=0.1),
        owner_pod_name="",
        owner_pod_uid="",
        out=out,
    )
    values.update(overrides)
    cfg = client.Configuration()
    cfg.host = kube.url
    return KubernetesBackend(KubernetesConfig(**values), client.ApiClient(cfg)), out


@pytest.fixture
def operator(kube: FakeKube) -> OperatorSim:
    return OperatorSim(kube)


# -- what Trainer and JobSet do ----------------------------------------------------------------------


def start(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created", reason="JobSetCreated", message="Succeeded to create JobSet")
    sim.start()


def until_said(sim: JobSim, out: io.StringIO, text: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while text not in out.getvalue():
        assert time.monotonic() < end, f"the backend did not say {text!r}:\n{out.getvalue()}"
        sim.sleep(0.02)


def s_success(sim: JobSim, out: io.StringIO) -> None:
    start(sim)
    for label in sim.labels():
        sim.log(label, f"hello from {label}")
    sim.exit_all(0)
    sim.condition("Complete", reason="JobsCompleted", message="jobset completed")


def s_failure(sim: JobSim, out: io.StringIO) -> None:
    start(sim)
    sim.log("node-1", "step 1", "Traceback (most recent call last):", "RuntimeError: node-1 ran out of memory")
    sim.exit("node-1", 3)
    sim.condition("Failed", reason="JobSetFailed", message="jobset failed")


def s_image_not_found(sim: JobSim, out: io.StringIO) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.image_pull_backoff("node-1")
    sim.wait_deleted()


def s_queued_then_admitted(sim: JobSim, out: io.StringIO) -> None:
    sim.condition("Created")
    assert sim.suspended, "Kueue's webhook suspends a TrainJob created with its queue-name label"
    sim.report_suspended()
    until_said(sim, out, "suspended until Kueue admits it from LocalQueue 'team-a'")
    sim.admit_from_queue()
    sim.report_resumed()
    s_success(sim, out)


CASES: list[tuple[str, Callable[[JobSim, io.StringIO], None], dict[str, Any], JobPhase, list[str]]] = [
    ("success", s_success, {}, JobPhase.SUCCEEDED, ["[node-0] hello from node-0", "[node-1] hello from node-1"]),
    ("failure", s_failure, {}, JobPhase.FAILED, ["RuntimeError: node-1 ran out of memory"]),
    # The kubelet says ErrImagePull, then ImagePullBackOff: the backend fails on whichever it sees first.
    ("image-not-found", s_image_not_found, {}, JobPhase.FAILED, ["cannot start: ", "ImagePull", "image busybox"]),
    (
        "kueue-suspended-then-admitted",
        s_queued_then_admitted,
        {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        JobPhase.SUCCEEDED,
        ["waiting: suspended until Kueue admits it from LocalQueue 'team-a'", "[node-1] hello from node-1"],
    ),
]


@pytest.mark.parametrize(("scenario", "metadata", "phase", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trainjob_scenarios(kube: FakeKube, operator: OperatorSim, scenario, metadata, phase, said) -> None:
    kube.admission.append(kueue_webhook)
    backend, out = make_backend(kube)
    operator.scenario = lambda sim: scenario(sim, out)
    result = backend.run(trainjob(**metadata), timeout=30)
    operator.join()
    assert not operator.errors, operator.errors
    assert result.phase == phase, (result.describe(), out.getvalue())
    text = out.getvalue() + result.describe() + "\n".join(result.log_tail)
    for fragment in said:
        assert fragment in text, text
    created = kube.created[-1]
    assert (created["apiVersion"], created["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    if phase == JobPhase.FAILED and scenario is s_failure:
        assert result.failed_replica == "node-1" and result.exit_code == 3
        assert result.log_tail[-1] == "RuntimeError: node-1 ran out of memory"
    if scenario is s_image_not_found:
        assert kube.jobs_of("trainjobs") == []  # the backend deletes a job it gives up on


def test_a_relaunched_step_reattaches_to_its_trainjob(kube: FakeKube, operator: OperatorSim) -> None:
    backend, _ = make_backend(kube)
    operator.scenario = lambda sim: (start(sim), sim.wait_deleted())  # type: ignore[func-returns-value]
    job = trainjob()
    stamp_run_identity(job, RUN_ID, TASK_ID)
    first = backend.submit(job)
    again, _ = make_backend(kube)
    second = again.submit(job)  # 409 AlreadyExists: the labels say it is this task's job
    assert (second.name, second.uid) == (first.name, first.uid)
    assert len(kube.jobs_of("trainjobs")) == 1
    again.cancel(second)
    assert kube.jobs_of("trainjobs") == []


def test_sigterm_deletes_the_trainjob(kube: FakeKube, operator: OperatorSim, tmp_path: Path) -> None:
    operator.scenario = lambda sim: (start(sim), sim.wait_deleted())  # type: ignore[func-returns-value]
    manifest = tmp_path / "trainjob.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "term"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "command": ["x"]}},
            }
        )
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "default"}}],
                "current-context": "fake",
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO_ROOT)}
    for name in ("KFP_POD_NAME", "KFP_POD_UID", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(manifest), "--backend", "kubernetes"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 30
        while not any(len(s.pod_names) == 2 for s in operator.sims):
            assert proc.poll() is None and time.monotonic() < end, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        while kube.jobs_of("trainjobs"):
            assert time.monotonic() - sent < 15, "TrainJob not deleted within 15 s of SIGTERM"
            time.sleep(0.05)
        rc = proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc != 0


# -- the trainjob_launch component, as a pipeline step runs it -----------------------------------------------


def test_trainjob_launch_step_puts_the_pod_settings_where_the_trainer_takes_them(
    kube: FakeKube, operator: OperatorSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from kftrain_components.training.trainjob_launch.component import trainjob_launch

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "team"}}],
                "current-context": "fake",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    def scenario(sim: JobSim) -> None:
        start(sim)
        env = {e["name"]: e.get("value") for e in sim.obj["spec"]["trainer"]["env"]}
        Path(env["KFTRAIN_MODEL_URI"]).mkdir(parents=True, exist_ok=True)
        (Path(env["KFTRAIN_MODEL_URI"]) / "model.bin").write_bytes(b"weights")
        sim.exit_all(0)
        sim.condition("Complete", reason="JobsCompleted", message="jobset completed")

    operator.scenario = scenario
    trainjob_launch.python_func(
        dataset=SimpleNamespace(uri=str(tmp_path / "dataset"), metadata={}),
        model=SimpleNamespace(uri=str(tmp_path / "model"), metadata={}),
        job=str(tmp_path / "job.json"),
        **kfp_outputs(tmp_path),
        run_id="4f1c9a6e-2b1d-4c8e-9f00-abcdef012345",
        task_id="9a8b7c6d-0000-1111-2222-333344445555",
        backend="kubernetes",
        image="registry.example.com/train:1",
        num_nodes=3,
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="trainer",
        image_pull_secrets=["regcred"],
        secret_env={"WANDB_API_KEY": "wandb/api-key"},
        storage_secret="mlpipeline-minio-artifact",
        pvc_mounts={"/data": "datasets"},
        queue_name="",
        cpu="2",
        memory="4Gi",
        gpus=1,
    )
    operator.join()
    assert not operator.errors, operator.errors
    (created,) = kube.created  # accepted by the TrainJob CRD's schema (the fake API validates every create)
    spec = created["spec"]
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 1)
    assert trainer["command"] == ["torchrun", "-m", "kftrain.trainers.torch_ddp"]
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}
    env = {e["name"]: e for e in trainer["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    assert "KFTRAIN_MODEL_URI" in env
    (patch,) = spec["runtimePatches"]
    assert patch["manager"] == "kftrain.io/launch"
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["serviceAccountName"] == "trainer"
    assert {v["name"] for v in pod["volumes"]} >= {"kftrain-shm", "pvc-datasets"}
    assert "env" not in pod["containers"][0]  # the webhook refuses env in a patch of the node container

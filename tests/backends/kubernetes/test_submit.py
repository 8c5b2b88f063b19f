"""Submitting to the Kubernetes backend: the job's name, labels and owner, its identity written before the wait,
the namespace, a relaunched step reattaching (and never adopting another task's job), what the API server
refuses, a TrainJob's runtime read before anything is created, and the platform's pod settings on the created job."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kftrain.backends.base import JobHandle, JobResult, load_identity
from kftrain.errors import KftrainError
from kftrain.job import PodSettings, apply_pod_settings, load_manifest, render_manifest
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.runtime import parse_runtime
from kftrain.job.naming import RUN_ID_LABEL, TASK_ID_LABEL, job_name_for, label_value
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import api_client, make_backend, mpi_job, pytorch_job, s_success, stamped
from testbed.manifests import trainjob


def test_identity_written_before_waiting(
    kube: FakeKube, operator: OperatorSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator.scenario = s_success
    seen: list[JobHandle] = []
    identity = tmp_path / "out" / "job.json"
    backend, _ = make_backend(kube, identity_path=identity)
    wait = backend.wait

    def wait_after_checking(handle: JobHandle, timeout: float | None = None) -> JobResult:
        assert load_identity(identity) == handle  # written first, then the wait
        assert not kube.deletions and kube.jobs_of("pytorchjobs")  # and the job exists
        seen.append(handle)
        return wait(handle, timeout)

    monkeypatch.setattr(backend, "wait", wait_after_checking)
    job = stamped(pytorch_job(), "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "task-7")
    assert backend.run(job, timeout=20).succeeded
    (handle,) = seen
    assert handle.backend == "kubernetes" and handle.namespace == "default" and handle.kind == "PyTorchJob"
    assert handle.uid == kube.jobs_of("pytorchjobs")[0]["metadata"]["uid"]
    assert json.loads(identity.read_text())["name"] == handle.name == job.name


def test_name_and_labels_from_run_and_task(kube: FakeKube) -> None:
    run_id, task_id = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "9a8b7c6d-0000-1111-2222-333344445555"
    backend, _ = make_backend(kube)
    handle = backend.submit(stamped(pytorch_job(), run_id, task_id))
    assert handle.name == job_name_for(run_id, task_id, base="digits")
    obj = kube.jobs_of("pytorchjobs")[0]
    assert obj["metadata"]["labels"][RUN_ID_LABEL] == run_id
    assert obj["metadata"]["labels"][TASK_ID_LABEL] == task_id
    pod_labels = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert pod_labels[RUN_ID_LABEL] == run_id


def test_job_name_for_is_deterministic_and_valid() -> None:
    run_id, task_id = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "9a8b7c6d-0000-1111-2222-333344445555"
    name = job_name_for(run_id, task_id, base="My_Very.Long Pipeline Step Name " * 3)
    assert name == job_name_for(run_id, task_id, base="My_Very.Long Pipeline Step Name " * 3)
    assert name != job_name_for(run_id, "other-task", base="My_Very.Long Pipeline Step Name " * 3)
    assert len(name) <= 63 and name[0].isalpha()

    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    assert job_name_for("1234", "t").startswith("kft-")
    assert len(job_name_for(run_id, task_id, max_length=63)) <= 63
    assert label_value("_abc/def_") == "abc-def"


def test_launcher_restarted_reattaches(kube: FakeKube, operator: OperatorSim) -> None:
    def slow_success(sim: JobSim) -> None:
        # The job runs until the restarted launcher has reattached (it adds its pod as an owner), then succeeds.
        while len(sim.kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]) < 2:
            sim.sleep(0.02)
        s_success(sim)

    operator.scenario = slow_success
    first, _ = make_backend(kube, owner_pod_name="launcher-a", owner_pod_uid="uid-a")
    h1 = first.submit(stamped(pytorch_job(), "run-42", "train"))  # ... and the launcher pod dies before waiting
    second, out = make_backend(kube, owner_pod_name="launcher-b", owner_pod_uid="uid-b")
    h2 = second.submit(stamped(pytorch_job(), "run-42", "train"))
    assert h2 == h1
    result = second.wait(h2, timeout=20)
    assert result.succeeded, result.describe()
    assert "reattached" in out.getvalue()
    assert len(kube.jobs_of("pytorchjobs")) == 1 and len(kube.created) == 1
    owners = kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == ["uid-a", "uid-b"]  # the new launcher keeps the job alive too


def test_existing_job_of_another_task_is_not_adopted(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    job = backend.prepare(stamped(pytorch_job(), "run-42", "train"))
    manifest = render_manifest(job)
    manifest["metadata"]["labels"][TASK_ID_LABEL] = "some-other-task"
    client.CustomObjectsApi(api_client(kube)).create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", manifest
    )
    with pytest.raises(KftrainError, match="not created by this task"):
        backend.submit(stamped(pytorch_job(), "run-42", "train"))
    assert len(kube.created) == 1


def test_owner_reference_from_kfp_env(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_POD_NAME", "pipeline-step-abc")
    monkeypatch.setenv("KFP_POD_UID", "0b9c-uid")
    backend, _ = make_backend(kube, owner_pod_name=None, owner_pod_uid=None)
    backend.submit(pytorch_job())
    (owner,) = kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "pipeline-step-abc",
        "uid": "0b9c-uid",
        "controller": False,
        "blockOwnerDeletion": False,
    }


def test_no_owner_reference_outside_kfp(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    monkeypatch.delenv("KFP_POD_UID", raising=False)
    backend, _ = make_backend(kube, owner_pod_name=None, owner_pod_uid=None)
    backend.submit(pytorch_job())
    assert "ownerReferences" not in kube.jobs_of("pytorchjobs")[0]["metadata"]


def test_namespace_from_service_account(kube: FakeKube, tmp_path: Path) -> None:
    ns_file = tmp_path / "namespace"
    ns_file.write_text("team-a\n")
    kube.add_namespace("team-a")  # the step's pod runs there, so it exists
    backend, _ = make_backend(kube, namespace=None, namespace_file=ns_file)
    handle = backend.submit(pytorch_job())
    assert handle.namespace == "team-a"
    assert kube.jobs_of("pytorchjobs")[0]["metadata"]["namespace"] == "team-a"
    fallback, _ = make_backend(kube, namespace=None, namespace_file=tmp_path / "absent")
    assert fallback.resolve_namespace() == "default"


def test_a_namespace_that_does_not_exist_is_named(kube: FakeKube) -> None:
    """A mistyped namespace: the API server refuses the create (404), and the step's error names it."""
    backend, _ = make_backend(kube, namespace="tema-a")
    with pytest.raises(KftrainError, match='HTTP 404 namespaces "tema-a" not found'):
        backend.submit(pytorch_job())
    assert kube.jobs_of("pytorchjobs") == []


def test_invalid_job_rejected_by_crd_schema(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    job = pytorch_job()
    job.replica_specs["Worker"].template.spec.extra["hostNetwork"] = "yes"  # schema: boolean
    with pytest.raises(KftrainError, match="HTTP 422"):
        backend.submit(job)
    assert kube.jobs_of("pytorchjobs") == []


def test_pod_settings_in_created_job(kube: FakeKube) -> None:
    settings = PodSettings(
        gpus=2,
        cpu="4",
        memory="16Gi",
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="trainer",
        image_pull_secrets=["regcred"],
        secret_env={"WANDB_API_KEY": "wandb/api-key"},
    )
    job = apply_pod_settings(pytorch_job(), settings)
    backend, _ = make_backend(kube)
    backend.submit(job)
    (created,) = kube.created
    for rtype in ("Master", "Worker"):
        pod = created["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
        assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert pod["serviceAccountName"] == "trainer"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        (container,) = pod["containers"]
        assert container["resources"] == {  # requests = limits for cpu and memory (Guaranteed); GPUs a limit
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 2},
        }
        secret_env = [e for e in container["env"] if e["name"] == "WANDB_API_KEY"]
        assert secret_env == [
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
        ]


def test_mpi_launcher_gets_no_gpu() -> None:
    job = apply_pod_settings(mpi_job(), PodSettings(gpus=1))
    launcher = job.replica_specs["Launcher"].template.spec.containers[0]
    worker = job.replica_specs["Worker"].template.spec.containers[0]
    assert launcher.resources is None
    assert worker.resources == {"limits": {"nvidia.com/gpu": 1}}


CLUSTER_TORCH = ("clustertrainingruntimes", "", "torch-distributed")


def _team_runtime(kube: FakeKube) -> dict[str, Any]:
    """Trainer's torch runtime as a namespaced TrainingRuntime ``team-torch``."""
    runtime = json.loads(json.dumps(kube.runtimes[CLUSTER_TORCH]))
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "team-torch", "namespace": "default"}
    return runtime


def _without_torch(kube: FakeKube) -> None:
    del kube.runtimes[CLUSTER_TORCH]


def _torch_is_mpi(kube: FakeKube) -> None:
    (mpi,) = [r for key, r in kube.runtimes.items() if key[2] == "deepspeed-distributed"]
    kube.runtimes[CLUSTER_TORCH] = {**mpi, "metadata": {"name": "torch-distributed"}}


def _forbidden(kube: FakeKube) -> None:
    kube.fault("403", path="/clustertrainingruntimes/torch-distributed$", times=10)


def _team_runtime_served(kube: FakeKube) -> None:
    kube.runtimes[("trainingruntimes", "default", "team-torch")] = _team_runtime(kube)


# (id, what the cluster holds, the runtime the TrainJob names, what the step says; None: the job is created)
RUNTIME_CASES: list[tuple[str, Callable[[FakeKube], None] | None, str, str | None]] = [
    ("served", None, "ClusterTrainingRuntime", None),
    ("missing", _without_torch, "ClusterTrainingRuntime", "the cluster has no ClusterTrainingRuntime named"),
    ("another-policy", _torch_is_mpi, "ClusterTrainingRuntime", "on the cluster has a mpi ML policy, but the job"),
    ("forbidden", _forbidden, "ClusterTrainingRuntime", "grant get on clustertrainingruntimes.trainer.kubeflow.org"),
    ("namespaced-served", _team_runtime_served, "TrainingRuntime", None),
    ("namespaced-missing", None, "TrainingRuntime", "no TrainingRuntime named 'team-torch' in namespace default"),
]


@pytest.mark.parametrize(
    ("cluster", "runtime_kind", "said"), [c[1:] for c in RUNTIME_CASES], ids=[c[0] for c in RUNTIME_CASES]
)
def test_a_trainjob_runtime_is_read_from_the_cluster_before_the_job_is_created(
    kube: FakeKube, cluster: Callable[[FakeKube], None] | None, runtime_kind: str, said: str | None
) -> None:
    name = "torch-distributed" if runtime_kind == "ClusterTrainingRuntime" else "team-torch"
    catalog = RuntimeCatalog([parse_runtime(_team_runtime(kube), "team-torch.yaml")])
    manifest = trainjob(name="tj", trainer={"command": ["x"]})
    manifest["spec"]["runtimeRef"]["kind"] = runtime_kind
    manifest["spec"]["runtimeRef"]["name"] = name
    job = load_manifest(manifest, runtimes=catalog)
    if cluster is not None:
        cluster(kube)
    backend, _ = make_backend(kube)
    if said is None:
        backend.submit(job)
        assert [c["kind"] for c in kube.created] == ["TrainJob"]
        return
    with pytest.raises(KftrainError) as raised:
        backend.submit(job)
    assert said in str(raised.value)
    assert kube.created == []  # nothing created

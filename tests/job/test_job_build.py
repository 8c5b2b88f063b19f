"""build_job: a job of every kind from typed replica inputs, its exact manifest, valid against the CRDs, and the
inputs it refuses."""

from __future__ import annotations

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import (
    CleanPodPolicy,
    ReplicaInput,
    RestartPolicy,
    RunPolicy,
    build_job,
    load_manifest,
    render_manifest,
    render_yaml,
)
from kftrain.job.kinds.pytorchjob import PyTorchJobSpec
from kftrain.job.pod_settings import PodSettings, apply_pod_settings


def test_build_job_exact_manifest(crd_schemas):
    built = build_job(
        "PyTorchJob",
        "digits",
        {
            # given out of order: rendered in the operator's order
            "Worker": ReplicaInput(
                2,
                command=["python", "train.py"],
                resources={"limits": {"cpu": "2"}},
                env={"ROLE": "worker"},
                restart_policy=RestartPolicy.EXIT_CODE,
            ),
            "Master": ReplicaInput(1, command=["python", "train.py"], args=["--epochs", "1"], image="other:2"),
        },
        image="train:1",
        namespace="ml",
        env={"A": "1"},
        labels={"team": "vision"},
        annotations={"note": "x"},
        spec=PyTorchJobSpec(
            run_policy=RunPolicy(backoff_limit=3, active_deadline_seconds=3600, clean_pod_policy=CleanPodPolicy.ALL),
            nproc_per_node="2",
        ),
    )
    # Credentials come through the one pod-settings policy, as a secretKeyRef after the job's own env.
    job = apply_pod_settings(built, PodSettings(secret_env={"TOKEN": "creds/token"}, storage_secret=""))
    shared_env = [
        {"name": "A", "value": "1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
    ]
    expected = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "digits", "namespace": "ml", "labels": {"team": "vision"}, "annotations": {"note": "x"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "other:2",
                                    "command": ["python", "train.py"],
                                    "args": ["--epochs", "1"],
                                    "env": shared_env,
                                }
                            ]
                        }
                    },
                },
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "ExitCode",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "train:1",
                                    "command": ["python", "train.py"],
                                    "env": [shared_env[0], {"name": "ROLE", "value": "worker"}, shared_env[1]],
                                    "resources": {"limits": {"cpu": "2"}},
                                }
                            ]
                        }
                    },
                },
            },
            "runPolicy": {"cleanPodPolicy": "All", "activeDeadlineSeconds": 3600, "backoffLimit": 3},
            "nprocPerNode": "2",
        },
    }
    rendered = render_manifest(job)
    assert rendered == expected
    assert list(rendered["spec"]["pytorchReplicaSpecs"]) == ["Master", "Worker"]
    assert crd_schemas.errors(rendered) == []
    assert render_manifest(load_manifest(render_yaml(job))) == expected


@pytest.mark.parametrize(
    ("kind", "api_version", "replicas", "container_name", "replica_key"),
    [
        ("TFJob", None, {"Worker": 2, "PS": 1, "Chief": 1}, "tensorflow", "tfReplicaSpecs"),
        ("MPIJob", None, {"Worker": 2, "Launcher": 1}, "mpi", "mpiReplicaSpecs"),
        ("MPIJob", "kubeflow.org/v1", {"Worker": 2, "Launcher": 1}, "mpi", "mpiReplicaSpecs"),
    ],
)
def test_build_job_per_kind(crd_schemas, kind, api_version, replicas, container_name, replica_key):
    job = build_job(
        kind,
        "j",
        {t: ReplicaInput(n, command=["run"]) for t, n in replicas.items()},
        image="img",
        api_version=api_version,
    )
    rendered = render_manifest(
        apply_pod_settings(job, PodSettings(tolerations=[{"key": "gpu", "operator": "Exists"}], storage_secret=""))
    )
    specs = rendered["spec"][replica_key]
    kind_order = {"TFJob": ["Chief", "PS", "Worker"], "MPIJob": ["Launcher", "Worker"]}[kind]
    assert list(specs) == kind_order
    for rtype, spec in specs.items():
        assert spec == {
            "replicas": replicas[rtype],
            "template": {
                "spec": {
                    "containers": [{"name": container_name, "image": "img", "command": ["run"]}],
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                }
            },
        }
    assert rendered["apiVersion"] == (
        api_version or {"TFJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1"}[kind]
    )
    assert crd_schemas.errors(rendered) == []


@pytest.mark.parametrize(
    ("kind", "replicas", "field"),
    [
        ("PyTorchJob", {"Master": 1, "worker": 1}, "spec.pytorchReplicaSpecs.worker"),
        ("PyTorchJob", {"Worker": 2}, "spec.pytorchReplicaSpecs.Master"),
        ("TFJob", {"Chief": 2}, "spec.tfReplicaSpecs.Chief.replicas"),
        ("MPIJob", {"Worker": 1}, "spec.mpiReplicaSpecs.Launcher"),
        ("XGBoostJob", {"Worker": 1}, "kind"),
    ],
)
def test_build_job_rejects(kind, replicas, field):
    with pytest.raises(JobSpecError) as exc:
        build_job(kind, "j", {t: ReplicaInput(n, command=["x"]) for t, n in replicas.items()})
    assert exc.value.field == field

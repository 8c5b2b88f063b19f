"""A manifest loads and renders back unchanged: fields the model does not type, run and elastic policies, every
kind's own fields, and the edge cases the operators accept."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kftrain.job import (
    CleanPodPolicy,
    RunPolicy,
    load_manifest,
    render_manifest,
    render_yaml,
)
from kftrain.job.kinds.pytorchjob import ElasticPolicy
from kftrain.job.model import SchedulingPolicy
from testbed.manifests import container, mpijob_v1, mpijob_v2, pytorchjob, replica, set_path, tfjob

POD_EXTRAS = {
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}, {"name": "shm", "emptyDir": {}}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]
            }
        }
    },
    "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
    "hostIPC": True,
}


CONTAINER_EXTRAS = {
    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
    "imagePullPolicy": "IfNotPresent",
    "workingDir": "/w",
}


def _with_extras(m: dict[str, Any], rtype: str, replica_key: str) -> dict[str, Any]:
    template = m["spec"][replica_key][rtype]["template"]
    template["metadata"] = {"labels": {"app": "x"}, "annotations": {"sidecar.istio.io/inject": "false"}}
    pod = template["spec"]
    pod.update(copy.deepcopy(POD_EXTRAS))
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod["nodeSelector"] = {"pool": "gpu"}
    pod["containers"][0].update(copy.deepcopy(CONTAINER_EXTRAS))
    pod["containers"].append(container("sidecar", ["sh"], env=[{"name": "X", "value": ""}]))
    return m


@pytest.mark.parametrize(
    ("m", "rtype", "replica_key"),
    [
        (pytorchjob({"Master": 1, "Worker": 2}), "Worker", "pytorchReplicaSpecs"),
        (tfjob({"Worker": replica(2, "tensorflow")}), "Worker", "tfReplicaSpecs"),
        (mpijob_v2({"Launcher": 1, "Worker": 2}), "Launcher", "mpiReplicaSpecs"),
        (mpijob_v1({"Launcher": 1, "Worker": 2}), "Worker", "mpiReplicaSpecs"),
    ],
)
def test_unknown_pod_template_fields_carried_through(crd_schemas, m, rtype, replica_key):
    m = _with_extras(m, rtype, replica_key)
    job = load_manifest(m)
    pod = job.replica_specs[rtype].template.spec
    assert pod.extra == POD_EXTRAS
    assert pod.containers[0].extra == CONTAINER_EXTRAS
    assert pod.tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    rendered = render_manifest(job)
    assert rendered == m
    assert crd_schemas.errors(rendered) == []
    # rendering hands out copies: editing one render does not change the job
    rendered["spec"][replica_key][rtype]["template"]["spec"]["volumes"].clear()
    rendered["spec"][replica_key][rtype]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "y"
    assert render_manifest(job) == m


RUN_POLICY = {
    "cleanPodPolicy": "Running",
    "ttlSecondsAfterFinished": 600,
    "activeDeadlineSeconds": 3600,
    "backoffLimit": 4,
    "suspend": False,
    "managedBy": "kubeflow.org/training-operator",
    "schedulingPolicy": {
        "minAvailable": 3,
        "queue": "team-a",
        "minResources": {"cpu": "3", "nvidia.com/gpu": "2"},
        "priorityClass": "high",
        "scheduleTimeoutSeconds": 120,
    },
}


@pytest.mark.parametrize(
    "m",
    [
        pytorchjob({"Master": 1, "Worker": 2}, runPolicy=RUN_POLICY, nprocPerNode="auto"),
        pytorchjob(
            {"Worker": replica(3, restart_policy="ExitCode")},
            runPolicy={"backoffLimit": 2, "activeDeadlineSeconds": 3600},
            nprocPerNode="4",
            elasticPolicy={
                "minReplicas": 1,
                "maxReplicas": 4,
                "rdzvBackend": "c10d",
                "rdzvPort": 29400,
                "rdzvHost": "rdzv.example",
                "rdzvId": "run-1",
                "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "read_timeout", "value": "60"}],
                "standalone": False,
                "maxRestarts": 3,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}],
            },
        ),
        tfjob(
            {"Chief": replica(1, "tensorflow"), "Worker": replica(2, "tensorflow", restart_policy="OnFailure")},
            runPolicy=RUN_POLICY,
            successPolicy="AllWorkers",
            enableDynamicWorker=True,
        ),
        mpijob_v2(
            {"Launcher": replica(1, "launcher"), "Worker": replica(1, "worker")},
            runPolicy={**RUN_POLICY, "managedBy": "kubeflow.org/mpi-operator"},  # mpi-operator's own name
            slotsPerWorker=4,
            sshAuthMountPath="/home/mpiuser/.ssh",
            launcherCreationPolicy="WaitForWorkersReady",
            runLauncherAsWorker=True,
            mpiImplementation="Intel",
        ),
        mpijob_v1(
            {"Launcher": replica(1, "trainer"), "Worker": replica(2, "trainer")},
            runPolicy={"cleanPodPolicy": "All"},
            slotsPerWorker=2,
            mainContainer="trainer",
            cleanPodPolicy="Running",
        ),
    ],
    ids=["pytorch-runpolicy", "pytorch-elastic", "tf", "mpi-v2beta1", "mpi-v1"],
)
def test_policies_round_trip(crd_schemas, m):
    job = load_manifest(m)
    rendered = render_manifest(job)
    assert rendered == m
    assert crd_schemas.errors(rendered) == []
    assert yaml.safe_load(render_yaml(job)) == m


def test_typed_policy_values():
    job = load_manifest(pytorchjob({"Master": 1, "Worker": 2}, runPolicy=RUN_POLICY))
    assert job.run_policy == RunPolicy(
        clean_pod_policy=CleanPodPolicy.RUNNING,
        ttl_seconds_after_finished=600,
        active_deadline_seconds=3600,
        backoff_limit=4,
        suspend=False,
        managed_by="kubeflow.org/training-operator",
        scheduling_policy=SchedulingPolicy(
            min_available=3,
            queue="team-a",
            min_resources={"cpu": "3", "nvidia.com/gpu": "2"},
            priority_class="high",
            schedule_timeout_seconds=120,
        ),
    )
    elastic = load_manifest(pytorchjob({"Worker": 2}, elasticPolicy={"maxReplicas": 3})).spec.elastic_policy
    assert elastic == ElasticPolicy(max_replicas=3)


@pytest.mark.parametrize(
    "m",
    [
        tfjob({"Worker": 1}, name="a" * 63),
        tfjob({"Worker": 1}, name="a-1"),
        pytorchjob({"Worker": 2}, elasticPolicy={"minReplicas": 1, "maxReplicas": 1}),
        mpijob_v2({"Launcher": 1}, runLauncherAsWorker=True),  # mpi-operator refuses a Worker spec of 0 pods
        set_path(tfjob({"Worker": 1}), "metadata", {"generateName": "run-"}),
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}, runPolicy={"backoffLimit": 0}),
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}, runPolicy={"activeDeadlineSeconds": 600}),
    ],
)
def test_valid_edge_cases_accepted(crd_schemas, m):
    job = load_manifest(m)
    assert render_manifest(job) == m
    assert crd_schemas.errors(render_manifest(job)) == []


def test_load_without_validation_keeps_semantic_errors():
    job = load_manifest(pytorchjob({"Worker": 2}), validate=False)
    assert job.replicas_of("Worker") == 2
    assert job.replicas_of("Master") == 0
    assert job.replica_specs["Worker"].count == 2
    assert load_manifest(tfjob({"Worker": {**replica(None, "tensorflow")}})).replica_specs["Worker"].count == 1


def test_status_is_dropped():
    m = tfjob({"Worker": 1})
    job = load_manifest({**m, "status": {"conditions": [{"type": "Running"}]}})
    assert render_manifest(job) == m

"""The job model: load, render, round trip, build, and errors that name the field to fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kftrain.errors import JobSpecError
from kftrain.job import (
    CleanPodPolicy,
    ReplicaInput,
    RestartPolicy,
    RunPolicy,
    build_job,
    load_manifest,
    load_manifest_file,
    render_manifest,
    render_yaml,
)
from kftrain.job.kinds.pytorchjob import ElasticPolicy, PyTorchJobSpec
from kftrain.job.model import SchedulingPolicy
from kftrain.job.pod_settings import PodSettings, apply_pod_settings
from tests.conftest import container, mpijob_v1, mpijob_v2, pytorchjob, replica, tfjob


def assert_crd_valid(crd_schemas, rendered: dict[str, Any]) -> None:
    assert crd_schemas.errors(rendered) == []


# --- official examples ---------------------------------------------------------------------------


def test_every_official_example_loads_round_trips_and_validates(example_manifests, crd_schemas):
    assert len(example_manifests) >= 6
    for name, path in example_manifests.items():
        raw = yaml.safe_load(path.read_text())
        job = load_manifest_file(path)
        rendered = render_manifest(job)
        assert rendered == raw, name
        assert crd_schemas.errors(rendered) == [], name
        # and once more through YAML text, as kubectl would read it
        assert render_manifest(load_manifest(render_yaml(job))) == raw, name


def test_examples_cover_every_kind_and_version(example_manifests):
    seen = {(j.kind, j.api_version) for j in map(load_manifest_file, example_manifests.values())}
    assert seen == {
        ("TFJob", "kubeflow.org/v1"),
        ("PyTorchJob", "kubeflow.org/v1"),
        ("MPIJob", "kubeflow.org/v1"),
        ("MPIJob", "kubeflow.org/v2beta1"),
    }


def test_example_typed_fields(example_manifests):
    job = load_manifest_file(example_manifests["training-operator-v1.9.0_pytorch_simple.yaml"])
    assert job.name == "pytorch-simple"
    assert job.metadata.namespace == "kubeflow"
    assert list(job.replica_specs) == ["Master", "Worker"]
    master = job.replica_specs["Master"]
    assert master.restart_policy is RestartPolicy.ON_FAILURE
    c = master.template.spec.containers[0]
    assert (c.name, c.command) == ("pytorch", ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])
    assert c.extra == {"imagePullPolicy": "Always"}


def test_crd_schema_validator_rejects_invalid_manifests(crd_schemas):
    bad = tfjob({"Worker": replica(1, "tensorflow")}, name="bad")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "x"
    errors = crd_schemas.errors(bad)
    assert len(errors) == 1
    assert errors[0].startswith("spec.tfReplicaSpecs.Worker.replicas: ")
    with pytest.raises(JobSpecError) as exc:
        crd_schemas.validate(bad)
    assert exc.value.field == "spec.tfReplicaSpecs.Worker.replicas"

    bad_impl = mpijob_v2({"Launcher": 1, "Worker": 1}, mpiImplementation="LAM")
    assert [e.split(":")[0] for e in crd_schemas.errors(bad_impl)] == ["spec.mpiImplementation"]

    unknown = {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "spec": {}}
    assert crd_schemas.errors(unknown)[0].startswith("apiVersion/kind:")


# --- build_job -----------------------------------------------------------------------------------


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
            run_policy=RunPolicy(backoff_limit=3, clean_pod_policy=CleanPodPolicy.ALL),
            nproc_per_node="2",
        ),
    )
    # Credentials come through the one pod-settings policy, as a secretKeyRef after the job's own env.
    job = apply_pod_settings(built, PodSettings(secret_env={"TOKEN": "creds/token"}))
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
            "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 3},
            "nprocPerNode": "2",
        },
    }
    rendered = render_manifest(job)
    assert rendered == expected
    assert list(rendered["spec"]["pytorchReplicaSpecs"]) == ["Master", "Worker"]
    assert_crd_valid(crd_schemas, rendered)
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
    rendered = render_manifest(apply_pod_settings(job, PodSettings(tolerations=[{"key": "gpu", "operator": "Exists"}])))
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
    assert_crd_valid(crd_schemas, rendered)


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


# --- fields the model does not type are carried through ------------------------------------------

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
    assert_crd_valid(crd_schemas, rendered)
    # rendering hands out copies: editing one render does not change the job
    rendered["spec"][replica_key][rtype]["template"]["spec"]["volumes"].clear()
    rendered["spec"][replica_key][rtype]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "y"
    assert render_manifest(job) == m


# --- policies and kind-specific fields round trip --------------------------------------------------

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
            runPolicy={"backoffLimit": 2},
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
            {"Launcher": replica(1, "launcher"), "Worker": replica(0, "worker")},
            runPolicy=RUN_POLICY,
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
    assert_crd_valid(crd_schemas, rendered)
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


# --- bad input: errors name the field ---------------------------------------------------------------


def _set(m: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = m
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[keys[-1]] = value
    return m


def _drop(m: dict[str, Any], path: str) -> dict[str, Any]:
    node = m
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    return m


PT = "spec.pytorchReplicaSpecs"
TF = "spec.tfReplicaSpecs"
MPI = "spec.mpiReplicaSpecs"
BAD_YAML = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x\nspec:\n  tfReplicaSpecs: {}\n"

BAD_INPUT = [
    ("unknown-kind", _set(tfjob({"Worker": 1}), "kind", "JAXJob"), "kind", "unknown kind 'JAXJob'"),
    ("missing-kind", _drop(tfjob({"Worker": 1}), "kind"), "kind", "missing"),
    ("unknown-apiversion", _set(pytorchjob({"Master": 1}), "apiVersion", "kubeflow.org/v2"), "apiVersion", "v2"),
    (
        "mpi-v1alpha2",
        _set(mpijob_v2({"Launcher": 1, "Worker": 1}), "apiVersion", "kubeflow.org/v1alpha2"),
        "apiVersion",
        "kubeflow.org/v2beta1",
    ),
    ("unknown-top-level", {**tfjob({"Worker": 1}), "status2": {}}, "status2", "unknown top-level"),
    ("missing-spec", _drop(tfjob({"Worker": 1}), "spec"), "spec", "missing"),
    ("empty-replica-specs", tfjob({}), TF, "at least one replica type"),
    (
        "unknown-replica-type",
        tfjob({"Launcher": replica(1, "tensorflow")}),
        f"{TF}.Launcher",
        "expected one of: Chief, Master, PS, Worker, Evaluator",
    ),
    ("wrong-case-worker", pytorchjob({"Master": 1, "worker": 1}), f"{PT}.worker", "did you mean 'Worker'?"),
    ("wrong-case-ps", tfjob({"ps": replica(1, "tensorflow")}), f"{TF}.ps", "did you mean 'PS'?"),
    ("negative-replicas", tfjob({"Worker": replica(-1, "tensorflow")}), f"{TF}.Worker.replicas", ">= 0"),
    ("two-masters", pytorchjob({"Master": 2}), f"{PT}.Master.replicas", "exactly 1"),
    (
        "replicas-not-int",
        pytorchjob({"Master": 1, "Worker": {**replica(1), "replicas": "two"}}),
        f"{PT}.Worker.replicas",
        "expected an integer, got str 'two'",
    ),
    (
        "replicas-bool",
        tfjob({"Worker": {**replica(1, "tensorflow"), "replicas": True}}),
        f"{TF}.Worker.replicas",
        "integer",
    ),
    (
        "restart-policy",
        tfjob({"Worker": replica(1, "tensorflow", restart_policy="Sometimes")}),
        f"{TF}.Worker.restartPolicy",
        "'Sometimes' is not one of",
    ),
    (
        "missing-containers",
        tfjob({"Worker": {"replicas": 1, "template": {"spec": {}}}}),
        f"{TF}.Worker.template.spec.containers",
        "every replica needs a container",
    ),
    ("missing-template", tfjob({"Worker": {"replicas": 1}}), f"{TF}.Worker.template.spec.containers", "missing"),
    (
        "no-pytorch-container",
        pytorchjob({"Master": replica(1, "main")}),
        f"{PT}.Master.template.spec.containers",
        "no container named 'pytorch'",
    ),
    (
        "no-tensorflow-container",
        tfjob({"Worker": replica(2, "tf")}),
        f"{TF}.Worker.template.spec.containers",
        "no container named 'tensorflow'",
    ),
    (
        "mpi-v1-main-container",
        mpijob_v1({"Launcher": 1, "Worker": 1}, mainContainer="trainer"),
        f"{MPI}.Worker.template.spec.containers",  # kubectl exec runs the ranks in the workers' mainContainer
        "'trainer'",
    ),
    (
        "container-without-name",
        tfjob({"Worker": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
        f"{TF}.Worker.template.spec.containers[0].name",
        "missing",
    ),
    (
        "env-without-name",
        tfjob({"Worker": replica(1, "tensorflow", env=[{"value": "x"}])}),
        f"{TF}.Worker.template.spec.containers[0].env[0].name",
        "missing",
    ),
    (
        "env-unknown-field",
        tfjob({"Worker": replica(1, "tensorflow", env=[{"name": "A", "valu": "x"}])}),
        f"{TF}.Worker.template.spec.containers[0].env[0].valu",
        "unknown field",
    ),
    ("pytorch-no-master", pytorchjob({"Worker": 2}), f"{PT}.Master", "only when the job has a Master"),
    ("mpi-no-launcher", mpijob_v2({"Worker": 2}), f"{MPI}.Launcher", "Launcher"),
    ("mpi-v1-no-launcher", mpijob_v1({"Worker": 2}), f"{MPI}.Launcher", "Launcher"),
    ("mpi-two-launchers", mpijob_v2({"Launcher": 2, "Worker": 1}), f"{MPI}.Launcher.replicas", "exactly 1"),
    ("mpi-no-workers", mpijob_v2({"Launcher": 1, "Worker": 0}), f"{MPI}.Worker", "runLauncherAsWorker"),
    ("mpi-slots", mpijob_v2({"Launcher": 1, "Worker": 1}, slotsPerWorker=0), "spec.slotsPerWorker", ">= 1"),
    (
        "exitcode-without-backoff",
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}),
        "spec.runPolicy.backoffLimit",
        "ExitCode",
    ),
    ("negative-backoff", tfjob({"Worker": 1}, runPolicy={"backoffLimit": -1}), "spec.runPolicy.backoffLimit", ">= 0"),
    (
        "zero-deadline",
        tfjob({"Worker": 1}, runPolicy={"activeDeadlineSeconds": 0}),
        "spec.runPolicy.activeDeadlineSeconds",
        "> 0",
    ),
    (
        "run-policy-typo",
        tfjob({"Worker": 1}, runPolicy={"backofLimit": 1}),
        "spec.runPolicy.backofLimit",
        "unknown field",
    ),
    (
        "clean-pod-policy",
        tfjob({"Worker": 1}, runPolicy={"cleanPodPolicy": "Some"}),
        "spec.runPolicy.cleanPodPolicy",
        "not one of: All, Running, None",
    ),
    (
        "elastic-in-tfjob",
        tfjob({"Worker": 1}, elasticPolicy={"maxReplicas": 2}),
        "spec.elasticPolicy",
        "not a field of TFJob",
    ),
    (
        "slots-in-pytorchjob",
        pytorchjob({"Master": 1}, slotsPerWorker=2),
        "spec.slotsPerWorker",
        "not a field of PyTorchJob",
    ),
    (
        "mpi-impl-in-v1",
        mpijob_v1({"Launcher": 1, "Worker": 1}, mpiImplementation="Intel"),
        "spec.mpiImplementation",
        "kubeflow.org/v1",
    ),
    (
        "main-container-in-v2beta1",
        mpijob_v2({"Launcher": 1, "Worker": 1}, mainContainer="x"),
        "spec.mainContainer",
        "v2beta1",
    ),
    ("unknown-spec-field", tfjob({"Worker": 1}, sucessPolicy="AllWorkers"), "spec.sucessPolicy", "unknown field"),
    ("success-policy", tfjob({"Worker": 1}, successPolicy="Any"), "spec.successPolicy", "AllWorkers"),
    ("chief-and-master", tfjob({"Chief": 1, "Master": 1}), TF, "either a Chief or a Master"),
    ("nproc-zero", pytorchjob({"Master": 1}, nprocPerNode="0"), "spec.nprocPerNode", "positive integer"),
    ("nproc-int", pytorchjob({"Master": 1}, nprocPerNode=2), "spec.nprocPerNode", "expected a string"),
    (
        "elastic-min-gt-max",
        pytorchjob({"Worker": 2}, elasticPolicy={"minReplicas": 3, "maxReplicas": 2}),
        "spec.elasticPolicy.maxReplicas",
        "minReplicas",
    ),
    (
        "elastic-min-zero",
        pytorchjob({"Worker": 2}, elasticPolicy={"minReplicas": 0}),
        "spec.elasticPolicy.minReplicas",
        ">= 1",
    ),
    ("bad-name", tfjob({"Worker": 1}, name="My_Job"), "metadata.name", "lower-case"),
    ("long-name", tfjob({"Worker": 1}, name="a" * 64), "metadata.name", "63"),
    ("no-name", _set(tfjob({"Worker": 1}), "metadata", {}), "metadata.name", "missing"),
    (
        "label-not-string",
        _set(tfjob({"Worker": 1}), "metadata.labels", {"v": 1}),
        "metadata.labels.v",
        "expected a string",
    ),
    ("malformed-yaml", BAD_YAML, "<manifest>", "malformed YAML at line 4"),
    ("two-documents", "kind: TFJob\n---\nkind: TFJob\n", "<manifest>", "exactly one job among its 2 YAML documents"),
]


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [pytest.param(d, f, m, id=i) for i, d, f, m in BAD_INPUT],
)
def test_bad_input_names_the_field(data, field, fragment):
    with pytest.raises(JobSpecError) as exc:
        load_manifest(data)
    assert exc.value.field == field
    assert fragment in exc.value.message
    assert str(exc.value) == f"{field}: {exc.value.message}"


def test_malformed_yaml_file_names_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(BAD_YAML)
    with pytest.raises(JobSpecError) as exc:
        load_manifest_file(path)
    assert exc.value.field == str(path)
    assert "line 4" in exc.value.message
    with pytest.raises(JobSpecError) as exc:
        load_manifest_file(tmp_path / "missing.yaml")
    assert exc.value.field == str(tmp_path / "missing.yaml")


# Checks the operators' admission webhooks make (training-operator v1.9 pkg/webhooks), made before creating.
WEBHOOK_RULES = [
    (
        "name-starts-with-digit",
        tfjob({"Worker": 1}, name="1job"),
        "metadata.name",
        "the operator webhooks require a DNS-1035 job name (must start with a letter)",
    ),
    (
        "pytorch-master-zero",
        pytorchjob({"Master": 0, "Worker": 2}),
        f"{PT}.Master.replicas",
        "the PyTorchJob webhook requires Master replicas == 1",
    ),
    (
        "elastic-without-worker",
        pytorchjob({"Master": 1}, elasticPolicy={"maxReplicas": 2}),
        f"{PT}.Worker",
        "elasticPolicy needs a Worker spec (webhook)",
    ),
    (
        "elastic-nproc-and-nprocPerNode",
        pytorchjob({"Worker": 2}, nprocPerNode="2", elasticPolicy={"nProcPerNode": 2}),
        "spec.elasticPolicy.nProcPerNode",
        "the PyTorchJob webhook forbids elasticPolicy.nProcPerNode together with nprocPerNode",
    ),
]


@pytest.mark.parametrize(
    ("data", "field"),
    [pytest.param(d, f, id=i) for i, d, f, _ in WEBHOOK_RULES],
)
def test_webhook_rules(data, field):
    with pytest.raises(JobSpecError) as exc:
        load_manifest(data)
    assert exc.value.field == field


@pytest.mark.parametrize(
    "m",
    [
        tfjob({"Worker": 1}, name="a" * 63),
        tfjob({"Worker": 1}, name="a-1"),
        pytorchjob({"Worker": 2}, elasticPolicy={"minReplicas": 1, "maxReplicas": 1}),
        mpijob_v2({"Launcher": 1, "Worker": 0}, runLauncherAsWorker=True),
        _set(tfjob({"Worker": 1}), "metadata", {"generateName": "run-"}),
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}, runPolicy={"backoffLimit": 0}),
    ],
)
def test_valid_edge_cases_accepted(crd_schemas, m):
    job = load_manifest(m)
    assert render_manifest(job) == m
    assert_crd_valid(crd_schemas, render_manifest(job))


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

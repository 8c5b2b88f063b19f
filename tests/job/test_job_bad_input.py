"""Bad job manifests are refused before anything is created, each error naming the field to fix: the model's own
checks, a malformed YAML file, and the operators' admission webhooks' rules."""

from __future__ import annotations

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import (
    load_manifest,
    load_manifest_file,
)
from kftrain.job.validate import validate_for_cluster
from testbed.manifests import drop_path, mpijob_v1, mpijob_v2, pytorchjob, replica, set_path, tfjob

PT = "spec.pytorchReplicaSpecs"


TF = "spec.tfReplicaSpecs"


MPI = "spec.mpiReplicaSpecs"


BAD_YAML = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x\nspec:\n  tfReplicaSpecs: {}\n"


BAD_INPUT = [
    ("unknown-kind", set_path(tfjob({"Worker": 1}), "kind", "JAXJob"), "kind", "unknown kind 'JAXJob'"),
    ("missing-kind", drop_path(tfjob({"Worker": 1}), "kind"), "kind", "missing"),
    ("unknown-apiversion", set_path(pytorchjob({"Master": 1}), "apiVersion", "kubeflow.org/v2"), "apiVersion", "v2"),
    (
        "mpi-v1alpha2",
        set_path(mpijob_v2({"Launcher": 1, "Worker": 1}), "apiVersion", "kubeflow.org/v1alpha2"),
        "apiVersion",
        "kubeflow.org/v2beta1",
    ),
    ("unknown-top-level", {**tfjob({"Worker": 1}), "status2": {}}, "status2", "unknown top-level"),
    ("missing-spec", drop_path(tfjob({"Worker": 1}), "spec"), "spec", "missing"),
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
    # ExitCode's replacements count against no backoffLimit but 0 (kftrain.job.kinds.base.Backoff.counts).
    (
        "exitcode-without-deadline",
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}),
        "spec.runPolicy.activeDeadlineSeconds",
        "spec.pytorchReplicaSpecs.Master.restartPolicy is ExitCode",
    ),
    (
        "exitcode-with-a-limit-only",
        pytorchjob({"Master": replica(1, restart_policy="ExitCode")}, runPolicy={"backoffLimit": 3}),
        "spec.runPolicy.activeDeadlineSeconds",
        "without counting it against spec.runPolicy.backoffLimit",
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
    ("no-name", set_path(tfjob({"Worker": 1}), "metadata", {}), "metadata.name", "missing"),
    (
        "label-not-string",
        set_path(tfjob({"Worker": 1}), "metadata.labels", {"v": 1}),
        "metadata.labels.v",
        "expected a string",
    ),
    # the pod the operator creates, as the API server checks it (kubernetes/kubernetes@v1.36.3:
    # pkg/apis/core/validation/validation.go ValidateContainerResourceRequirements, validateAffinity, ValidateVolumes)
    (
        "request-above-limit",
        pytorchjob({"Master": replica(1, resources={"limits": {"cpu": "1"}, "requests": {"cpu": "1500m"}})}),
        f"{PT}.Master.template.spec.containers[0].resources.requests.cpu",
        "1500m must be less than or equal to cpu limit of 1",
    ),
    (
        "gpu-request-not-its-limit",
        pytorchjob(
            {"Master": replica(1, resources={"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 1}})}
        ),
        f"{PT}.Master.template.spec.containers[0].resources.requests.nvidia.com/gpu",
        "1 must be equal to nvidia.com/gpu limit of 2",
    ),
    (
        "affinity-not-a-mapping",
        set_path(pytorchjob({"Master": 1}), "spec.pytorchReplicaSpecs.Master.template.spec.affinity", ["zone-a"]),
        f"{PT}.Master.template.spec.affinity",
        "expected a mapping",
    ),
    (
        "volume-of-two-types",
        set_path(
            pytorchjob({"Master": 1}),
            "spec.pytorchReplicaSpecs.Master.template.spec.volumes",
            [{"name": "v", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "c"}}],
        ),
        f"{PT}.Master.template.spec.volumes[0]",
        "may not specify more than 1 volume type",
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
    (
        "pytorch-worker-zero",
        pytorchjob({"Master": 1, "Worker": 0}),
        f"{PT}.Worker.replicas",
        "the PyTorchJob webhook forbids a replica spec of fewer than 1 pod",
    ),
    (
        "managed-by-another",
        tfjob({"Worker": 1}, runPolicy={"managedBy": "example.com/other"}),
        "spec.runPolicy.managedBy",
        "training-operator's webhooks take its own name and MultiKueue's",
    ),
    # mpi-operator v0.8.2 has no webhook: its controller refuses these and never runs the job.
    (
        "mpi-worker-zero-beside-a-launcher-as-worker",
        mpijob_v2({"Launcher": 1, "Worker": 0}, runLauncherAsWorker=True),
        f"{MPI}.Worker.replicas",
        "a Worker spec must have >= 1 pod even when the Launcher is a worker",
    ),
    (
        "mpi-restart-exit-code",
        mpijob_v2({"Launcher": 1, "Worker": replica(1, "worker", restart_policy="ExitCode")}),
        f"{MPI}.Worker.restartPolicy",
        "mpi-operator takes Never and OnFailure only",
    ),
    (
        "mpi-managed-by-training-operator",
        mpijob_v2({"Launcher": 1, "Worker": 1}, runPolicy={"managedBy": "kubeflow.org/training-operator"}),
        "spec.runPolicy.managedBy",
        "mpi-operator's own name is kubeflow.org/mpi-operator",
    ),
    (
        "mpi-name-too-long-for-its-workers",
        mpijob_v2({"Launcher": 1, "Worker": 10}, name="m" * 55),
        "metadata.name",
        "the last Worker's host name, <name>-worker-9, is over 63 characters",
    ),
    (
        "mpi-generate-name-too-long-for-its-workers",
        set_path(mpijob_v2({"Launcher": 1, "Worker": 1}), "metadata", {"generateName": "m" * 50 + "-"}),
        "metadata.generateName",
        "the API server adds 5 characters to a generateName",
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


def test_a_container_without_an_image_runs_locally_and_is_refused_for_a_cluster():
    """A replica here is a process of this machine (a function job has no image); a pod needs one."""
    job = load_manifest(pytorchjob({"Master": replica(1, image=""), "Worker": 1}))
    with pytest.raises(JobSpecError) as exc:
        validate_for_cluster(job)
    assert exc.value.field == f"{PT}.Master.template.spec.containers[0].image"
    validate_for_cluster(load_manifest(pytorchjob({"Master": 1, "Worker": 1})))


def test_mpi_operator_rules_are_not_training_operators():
    """training-operator's v1 MPIJob has no webhook: ExitCode and its own managedBy are its to judge."""
    worker = replica(1, "trainer", restart_policy="ExitCode")
    load_manifest(mpijob_v1({"Launcher": 1, "Worker": worker}, runPolicy={"backoffLimit": 0}))
    load_manifest(mpijob_v2({"Launcher": 1, "Worker": 1}, runPolicy={"managedBy": "kubeflow.org/mpi-operator"}))

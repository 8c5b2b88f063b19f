"""A table of bad inputs, judged by a real kube-apiserver, the real operators beside it and ``kftrain validate
--crd-dir``: whatever the real system refuses, kftrain must refuse too.

First by the API server alone, with no operator running: the CRD (its schema, CEL rules, list keys and scale
subresource) and the ObjectMeta rules every object obeys. Then, for each input the CRD admits, by a control plane
running the operators: training-operator's and Trainer's validating webhooks refuse at admission; mpi-operator v0.8.2
has no webhook, and its controller refuses a job it finds invalid with a Warning event (reason ValidationError).
Where only kftrain refuses, the row says why; where only the real system refuses, the row is a known gap (xfail).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.controlplane import suite
from testbed.controlplane.admission import EXAMPLES, Manifest, create, kftrain_validate, load
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.kubeflow_operators import OPERATORS
from testbed.controlplane.module_fixtures import bare_cluster_fixture, custom_fixture  # noqa: F401
from testbed.controlplane.namespaces import install_cluster_runtimes, ready_namespace

pytestmark = suite.MARKS

NAMESPACE = "kftrain-admission"


# --- what must be refused ---------------------------------------------------------------------------


def at(*path: str | int, value: Any) -> Callable[[Manifest], None]:
    """A change: set the field at ``path`` (a missing last key is added)."""

    def change(manifest: Manifest) -> None:
        parent: Any = manifest
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value

    return change


def without(*path: str) -> Callable[[Manifest], None]:
    def change(manifest: Manifest) -> None:
        parent: Any = manifest
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]

    return change


def twice(*path: str | int) -> Callable[[Manifest], None]:
    """A change: repeat the first item of the list at ``path`` (a list keyed by name gets a duplicate key)."""

    def change(manifest: Manifest) -> None:
        items: Any = manifest
        for key in path:
            items = items[key]
        items.append(copy.deepcopy(items[0]))

    return change


PT_WORKER = ("spec", "pytorchReplicaSpecs", "Worker")
PT_CONTAINER = (*PT_WORKER, "template", "spec", "containers", 0)
TF_WORKER = ("spec", "tfReplicaSpecs", "Worker")
TF_CONTAINER = (*TF_WORKER, "template", "spec", "containers", 0)
MPI_WORKER = ("spec", "mpiReplicaSpecs", "Worker")
ENV_TWICE = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
CONTAINER = ("template", "spec", "containers", 0)  # a replica spec's first container
# Each kind, its Worker replica spec, and that spec's containers as the API server names them.
WORKER_CONTAINERS = [
    (kind, ("spec", key, "Worker"), f"spec.{key}.Worker.template.spec.containers")
    for kind, key in (("pytorchjob", "pytorchReplicaSpecs"), ("tfjob", "tfReplicaSpecs"), ("mpijob", "mpiReplicaSpecs"))
]
CHIEF = {"name": "chief", "image": "docker.io/kftrain/python-horovod-pytorch-cpu:0.1.0"}
PT_MASTER = ("spec", "pytorchReplicaSpecs", "Master")
MPI_LAUNCHER = ("spec", "mpiReplicaSpecs", "Launcher")
TF_CHIEF = {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "example.com/tf:1"}]}}}
PT_CHIEF = {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "example.com/pt:1"}]}}}

# How the real operator refuses an input its CRD admits.
WEBHOOK = "webhook"  # its validating webhook refuses the create
CONTROLLER = "controller"  # admitted; its controller records a ValidationError Warning event and never runs it
# training-operator@v1.9.0:pkg/webhooks/pytorch/pytorchjob_webhook.go and pkg/webhooks/tensorflow/tfjob_webhook.go
TO_WEBHOOK = "training-operator v1.9.0's webhook"
# mpi-operator@v0.8.2:pkg/apis/kubeflow/validation/validation.go, run by pkg/controller/mpi_job_controller.go:608
MPI_CONTROLLER = "mpi-operator v0.8.2's ValidateMPIJob"


@dataclass(frozen=True)
class Bad:
    id: str
    example: str  # examples/manifests/<example>.yaml
    change: Callable[[Manifest], None]
    # False where the CRD allows it: the operator may still refuse it (``operator_refuses``).
    apiserver_refuses: bool = True
    # Where the CRD allows it: WEBHOOK or CONTROLLER when the operator refuses it, "" when nothing real does, and
    # ``why`` then says why kftrain refuses it anyway.
    operator_refuses: str = ""
    why: str = ""
    strict: bool = False  # create with fieldValidation=Strict
    # Set where the real system refuses and kftrain validate admits: a known gap, run as xfail.
    gap: str = ""
    # The field kftrain's error names, where the row pins it (the field the user wrote, the repeat of a key).
    names: str = ""


BAD = [
    # The CRDs' own rules: both refuse.
    Bad("trainjob-args-over-max", "trainjob", at("spec", "trainer", "args", value=["x"] * 129)),  # maxItems: 128
    Bad("trainjob-image-over-max", "trainjob", at("spec", "trainer", "image", value="a" * 501)),  # maxLength: 500
    # The TrainJob CRD's CEL rule: a DNS label (RFC 1035), where any other custom resource may have dots.
    Bad("trainjob-dotted-name", "trainjob", at("metadata", "name", value="trainjob.dotted")),
    Bad("trainjob-managed-by", "trainjob", at("spec", "managedBy", value="example.com/other")),  # CEL rule
    # minimum: 1; a TrainJob has no runPolicy, the field is its spec's own
    Bad(
        "trainjob-deadline-zero",
        "trainjob",
        at("spec", "activeDeadlineSeconds", value=0),
        names="spec.activeDeadlineSeconds",
    ),
    Bad("trainjob-no-runtime-ref", "trainjob", without("spec", "runtimeRef")),  # required
    Bad("pytorchjob-no-replica-specs", "pytorchjob", without("spec", "pytorchReplicaSpecs")),  # required
    # The CRD has no minimum, but Worker.replicas is its scale subresource's specReplicasPath, which must be
    # non-negative (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/
    # validator.go, "should be a non-negative integer").
    Bad("pytorchjob-worker-replicas-negative", "pytorchjob", at(*PT_WORKER, "replicas", value=-1)),
    Bad("pytorchjob-env-twice", "pytorchjob", at(*PT_CONTAINER, "env", value=ENV_TWICE)),  # list-map key: name
    Bad("pytorchjob-cpu-not-a-quantity", "pytorchjob", at(*PT_CONTAINER, "resources", value={"limits": {"cpu": "x"}})),
    Bad("pytorchjob-bad-label-key", "pytorchjob", at("metadata", "labels", value={"bad key": "x"})),  # ObjectMeta
    Bad("pytorchjob-upper-case-name", "pytorchjob", at("metadata", "name", value="PyTorch-Hello")),  # ObjectMeta
    Bad("tfjob-replicas-not-an-integer", "tfjob", at(*TF_WORKER, "replicas", value="two")),
    Bad("tfjob-replicas-over-int32", "tfjob", at(*TF_WORKER, "replicas", value=2**31)),  # format: int32
    Bad("tfjob-unknown-field-strict", "tfjob", at("spec", "enableDynamicWorkers", value=True), strict=True),
    Bad("mpijob-unknown-mpi-implementation", "mpijob", at("spec", "mpiImplementation", value="OpenMPIX")),  # enum
    # Lists keyed by name (x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [name]) refuse a repeated key
    # (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go,
    # ValidateListSetsAndMaps): the CRD validator holds every list to its list type.
    Bad("trainjob-env-twice", "trainjob", at("spec", "trainer", "env", value=ENV_TWICE), names="spec.trainer.env[1]"),
    *(
        Bad(f"{kind}-container-twice", kind, twice(*worker, "template", "spec", "containers"), names=f"{path}[1]")
        for kind, worker, path in WORKER_CONTAINERS
    ),
    # A container's env: kftrain's own rule (kftrain.job.validate, run with or without CRDs) names the repeat first.
    *(
        Bad(f"{kind}-env-twice", kind, at(*worker, *CONTAINER, "env", value=ENV_TWICE), names=f"{path}[0].env[1].name")
        for kind, worker, path in WORKER_CONTAINERS
        if kind != "pytorchjob"  # above: the list-map key's own rule
    ),
    # ports are keyed by (containerPort, protocol), and the API server fills in protocol's default (TCP) first: the
    # two are one key (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting/
    # algorithm.go, Default).
    Bad(
        "pytorchjob-port-twice-by-default",
        "pytorchjob",
        at(*PT_CONTAINER, "ports", value=[{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]),
        names="spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].ports[1]",
    ),
    # The CRD admits; training-operator's webhook refuses.
    Bad(
        "pytorchjob-master-replicas-negative",
        "pytorchjob",
        at(*PT_MASTER, "replicas", value=-1),
        apiserver_refuses=False,  # no minimum, and Master is not the scale subresource's path
        operator_refuses=WEBHOOK,  # a Master "must be 1"
    ),
    Bad("pytorchjob-master-replicas-two", "pytorchjob", at(*PT_MASTER, "replicas", value=2), False, WEBHOOK),
    Bad("pytorchjob-worker-replicas-zero", "pytorchjob", at(*PT_WORKER, "replicas", value=0), False, WEBHOOK),
    Bad("pytorchjob-chief", "pytorchjob", at("spec", "pytorchReplicaSpecs", "Chief", value=PT_CHIEF), False, WEBHOOK),
    Bad("pytorchjob-no-pytorch-container", "pytorchjob", at(*PT_CONTAINER, "name", value="main"), False, WEBHOOK),
    Bad("pytorchjob-empty-image", "pytorchjob", at(*PT_CONTAINER, "image", value=""), False, WEBHOOK),
    # The webhook's NameIsDNS1035Label, where a custom resource's name may otherwise have dots.
    Bad("pytorchjob-dotted-name", "pytorchjob", at("metadata", "name", value="pt.dotted"), False, WEBHOOK),
    Bad(
        "pytorchjob-managed-by",
        "pytorchjob",
        at("spec", "runPolicy", "managedBy", value="example.com/other"),
        False,
        WEBHOOK,  # training-operator@v1.9.0:pkg/common/util/webhooks.go, ValidateRunPolicy
        names="spec.runPolicy.managedBy",
    ),
    Bad(
        "pytorchjob-nproc-per-node-twice",
        "pytorchjob",
        lambda m: m["spec"].update(nprocPerNode="2", elasticPolicy={"nProcPerNode": 2, "maxReplicas": 2}),
        False,
        WEBHOOK,
    ),
    Bad("tfjob-no-containers", "tfjob", at(*TF_CONTAINER[:-1], value=[]), False, WEBHOOK),  # no minItems in the CRD
    Bad("tfjob-no-tensorflow-container", "tfjob", at(*TF_CONTAINER, "name", value="main"), False, WEBHOOK),
    Bad("tfjob-dotted-name", "tfjob", at("metadata", "name", value="tf.dotted"), False, WEBHOOK),
    Bad(
        "tfjob-chief-and-master",
        "tfjob",
        lambda m: m["spec"]["tfReplicaSpecs"].update(Chief=copy.deepcopy(TF_CHIEF), Master=copy.deepcopy(TF_CHIEF)),
        False,
        WEBHOOK,
    ),
    # The CRD admits; Trainer v2.3.0's TrainJob webhook refuses (pkg/webhooks/trainjob_webhook.go, ValidateCreate).
    Bad(
        "trainjob-torch-reserved-env",
        "trainjob",
        at("spec", "trainer", "env", value=[{"name": "PET_NNODES", "value": "3"}]),
        False,
        WEBHOOK,  # plugins/torch/torch.go, Validate
        names="spec.trainer.env",
    ),
    Bad(
        "trainjob-runtime-not-installed",
        "trainjob",
        at("spec", "runtimeRef", "name", value="no-such-runtime"),
        False,
        WEBHOOK,  # core/clustertrainingruntime.go, ValidateObjects: "must be created before the TrainJob"
        names="spec.runtimeRef",
    ),
    Bad(
        "trainjob-num-nodes-negative",
        "trainjob",
        at("spec", "trainer", "numNodes", value=-1),
        apiserver_refuses=False,
        why="no minimum in Trainer v2.3.0's CRD and no plugin's Validate looks at it (the webhook admits it): the "
        "trainer's Job would ask for -1 pods, which the Job API refuses "
        "(kubernetes@v1.36.3:pkg/apis/batch/validation/validation.go, validateJobSpec: parallelism)",
        names="spec.trainer.numNodes",
    ),
    # The CRD admits; mpi-operator's controller refuses.
    Bad("mpijob-slots-negative", "mpijob", at("spec", "slotsPerWorker", value=-1), False, CONTROLLER),
    Bad("mpijob-launcher-replicas-two", "mpijob", at(*MPI_LAUNCHER, "replicas", value=2), False, CONTROLLER),
    Bad("mpijob-worker-replicas-zero", "mpijob", at(*MPI_WORKER, "replicas", value=0), False, CONTROLLER),
    Bad("mpijob-no-launcher", "mpijob", without(*MPI_LAUNCHER), False, CONTROLLER),
    Bad(
        "mpijob-restart-policy-unknown",
        "mpijob",
        at(*MPI_WORKER, "restartPolicy", value="Sometimes"),
        False,
        CONTROLLER,
    ),
    # validRestartPolicies: Never and OnFailure only, where training-operator takes ExitCode and Always too.
    Bad(
        "mpijob-restart-policy-exit-code",
        "mpijob",
        at(*MPI_WORKER, "restartPolicy", value="ExitCode"),
        False,
        CONTROLLER,
    ),
    # validateMPIJobName: the last worker's host name, <name>-worker-<n-1>, must be a DNS-1035 label.
    Bad("mpijob-name-too-long-for-its-workers", "mpijob", at("metadata", "name", value="m" * 60), False, CONTROLLER),
    # What only kftrain refuses.
    Bad(
        "tfjob-unknown-field",
        "tfjob",
        at("spec", "enableDynamicWorkers", value=True),
        apiserver_refuses=False,
        why="the server's default fieldValidation (Warn) drops an unknown field with a warning "
        "(kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go, fieldValidation): the "
        "user asked for something that will not happen",
    ),
    Bad(
        "pytorchjob-restart-policy-unknown",
        "pytorchjob",
        at(*PT_WORKER, "restartPolicy", value="Sometimes"),
        apiserver_refuses=False,
        why=f"{TO_WEBHOOK} checks no restartPolicy; its controller copies it into each pod "
        "(training-operator@v1.9.0:pkg/core/pod.go, SetRestartPolicy, from pkg/controller.v1/common/pod.go), which "
        "the API server then refuses: the job would never have a pod",
    ),
    Bad(
        "pytorchjob-security-context-negative-user",
        "pytorchjob",
        at(*PT_CONTAINER, "securityContext", value={"runAsUser": -1}),
        apiserver_refuses=False,
        why="the CRD's schema takes any int64 and the webhook looks at no securityContext; the API server refuses "
        "the pod the operator creates from it (kubernetes@v1.36.3:pkg/apis/core/validation/validation.go, "
        "ValidateSecurityContext: a user id 0 to 2147483647), so the job would never have its Workers",
        names="spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].securityContext.runAsUser",
    ),
    Bad(
        "mpijob-unknown-replica-type",
        "mpijob",
        at("spec", "mpiReplicaSpecs", "Chief", value={"replicas": 1, "template": {"spec": {"containers": [CHIEF]}}}),
        apiserver_refuses=False,
        why=f"{MPI_CONTROLLER} checks the Launcher and the Worker only and ignores any other key: the replicas "
        "asked for would never run",
    ),
]


def bad_params() -> list[Any]:
    params = []
    for bad in BAD:
        # raises=AssertionError: only kftrain's admitting is the known gap; the API server's answer is checked
        # with pytest.fail, which no xfail hides.
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=bad.gap)] if bad.gap else []
        params.append(pytest.param(bad, id=bad.id, marks=marks))
    return params


def test_every_row_the_crd_admits_says_who_refuses_it() -> None:
    unexplained = [b.id for b in BAD if not b.apiserver_refuses and not (b.operator_refuses or b.why)]
    assert unexplained == []


def bad_manifest(bad: Bad, folder: Path) -> tuple[Manifest, Path]:
    """The row's example with its change, named after the row (each its own object: those admitted stay in the
    namespace), and the file kftrain validates."""
    manifest = load(EXAMPLES / f"{bad.example}.yaml")
    manifest["metadata"]["name"] = bad.id
    bad.change(manifest)
    path = folder / f"{bad.id}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return manifest, path


def assert_kftrain_refuses(bad: Bad, path: Path, refused_by: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, said = kftrain_validate(path, capsys)
    assert code != 0, f"kftrain validate admits what {refused_by} refuses: {said}"
    if bad.names:
        assert f"error: {bad.names}: " in said, said


@pytest.mark.parametrize("bad", bad_params())
def test_bad_input(
    bad: Bad, cluster: ControlPlane, custom: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, path = bad_manifest(bad, tmp_path)
    answer = create(cluster, custom, manifest, NAMESPACE, strict=bad.strict)
    if answer.refused != bad.apiserver_refuses:
        said = answer.body.get("message") if answer.refused else f"admitted, warnings {answer.warnings}"
        pytest.fail(f"the API server {'refused' if answer.refused else 'admitted'} it: {said}")
    if answer.refused:
        # Invalid; an unknown field under Strict is a BadRequest
        # (kubernetes@v1.36.3:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go, FieldValidationStrict).
        assert answer.status == (400 if bad.strict else 422), answer.body
    # What the CRD admits, the operators' table below judges; kftrain refuses it either way.
    assert_kftrain_refuses(bad, path, f"the API server ({answer.body.get('message')})", capsys)


# --- with the operators running -----------------------------------------------------------------------------

CONTROLLER_VERDICT_S = 60.0  # the controller judges a new job within a sync


@dataclass
class Operated:
    plane: ControlPlane
    custom: Any
    core: Any


@pytest.fixture(scope="module")
def operated() -> Iterator[Operated]:
    """A control plane running every operator, its webhooks served; the namespace, and Trainer's runtimes the
    example TrainJob names. Module-scoped: another module's operators must not run beside these."""
    for plane in for_tests(operators=tuple(OPERATORS)):
        with plane.api_client() as api_client:
            ready_namespace(api_client, NAMESPACE)
            install_cluster_runtimes(api_client)
            yield Operated(plane, client.CustomObjectsApi(api_client), client.CoreV1Api(api_client))


def controller_verdict(operated: Operated, manifest: Manifest) -> str:
    """For an admitted MPIJob: mpi-operator's ValidationError message, or "" once the controller has taken the job
    (it sets the Created condition only past validation: mpi-operator@v0.8.2:pkg/controller/mpi_job_controller.go,
    syncHandler)."""
    name = manifest["metadata"]["name"]
    where = operated.plane.resource(manifest)
    deadline = time.monotonic() + CONTROLLER_VERDICT_S
    while time.monotonic() < deadline:
        events = operated.core.list_namespaced_event(
            NAMESPACE, field_selector=f"involvedObject.name={name},reason=ValidationError"
        ).items
        if events:
            return str(events[0].message)
        job = operated.custom.get_namespaced_custom_object(where.group, where.version, NAMESPACE, where.plural, name)
        if (job.get("status") or {}).get("conditions"):
            return ""
        time.sleep(0.2)
    pytest.fail(f"mpi-operator neither refused nor took {name} within {CONTROLLER_VERDICT_S:g} s")


@pytest.mark.parametrize("bad", [p for p in bad_params() if not p.values[0].apiserver_refuses])
def test_bad_input_with_the_operators(
    bad: Bad, operated: Operated, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the CRD admits, judged by the operators: the real admission (their webhooks), and for an MPIJob the
    controller's validation; kftrain must refuse whatever they refuse."""
    manifest, path = bad_manifest(bad, tmp_path)
    answer = create(operated.plane, operated.custom, manifest, NAMESPACE, strict=bad.strict)
    if answer.refused:
        # A webhook's denial (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/
        # statuserror.go, ToStatusErr: "admission webhook ... denied the request")
        assert "denied the request" in str(answer.body.get("message")), answer.body
        verdict, said = WEBHOOK, str(answer.body.get("message"))
    elif manifest["kind"] == "MPIJob":
        said = controller_verdict(operated, manifest)
        verdict = CONTROLLER if said else ""
    else:
        verdict, said = "", f"admitted, warnings {answer.warnings}"
    if verdict != bad.operator_refuses:
        pytest.fail(
            f"expected {bad.operator_refuses or 'nothing'} to refuse it, but {verdict or 'nothing'} did: {said}"
        )
    assert_kftrain_refuses(bad, path, f"the operator's {verdict} ({said})" if verdict else "nothing real", capsys)

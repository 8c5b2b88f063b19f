"""What a real kube-apiserver admits, beside what ``kftrain validate`` says.

The API server (testbed/controlplane: kube-apiserver and etcd built from Go modules, the operators' CRDs
installed) is the judge the fake API server imitates: every example manifest must be admitted as it is (nothing
pruned, no warning), and for a table of bad inputs both it and ``kftrain validate --crd-dir`` must refuse. Where
only kftrain refuses, the row says why; where only the API server refuses, the row is a known gap (xfail).

No operator runs, so no admission webhook either: the API server judges by the CRD alone (its schema, CEL rules,
list keys and scale subresource) and the ObjectMeta rules every object obeys.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kftrain.cli.app import main as kftrain_main
from testbed import REPO_ROOT, reference
from testbed.controlplane.cluster import ControlPlane, for_tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    # One control plane per worker: keep the module's tests on one.
    pytest.mark.xdist_group("controlplane"),
]

EXAMPLES = REPO_ROOT / "examples" / "manifests"
NAMESPACE = "kftrain-admission"
Manifest = dict[str, Any]


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    # A control plane of this module's own: the other module's tests create cluster-wide objects of the same names.
    yield from for_tests()


@pytest.fixture(scope="session")
def custom(cluster: ControlPlane) -> Iterator[Any]:
    """CustomObjectsApi on the control plane, with the namespace the tests create their objects in."""
    with cluster.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": NAMESPACE}})
        yield client.CustomObjectsApi(api_client)


@dataclass
class Answer:
    """The API server's answer to a create."""

    status: int
    body: Manifest
    warnings: list[str]

    @property
    def refused(self) -> bool:
        return self.status >= 400


def create(plane: ControlPlane, custom: Any, manifest: Manifest, *, strict: bool = False) -> Answer:
    """POST ``manifest`` as kftrain's launcher does (CustomObjectsApi, the server's default field validation,
    Warn) or, with ``strict``, with fieldValidation=Strict."""
    where = plane.resource(manifest)
    options: dict[str, Any] = {"_preload_content": False}
    if strict:
        options["field_validation"] = "Strict"
    try:
        if where.namespaced:
            response = custom.create_namespaced_custom_object(
                where.group, where.version, NAMESPACE, where.plural, manifest, **options
            )
        else:
            response = custom.create_cluster_custom_object(
                where.group, where.version, where.plural, manifest, **options
            )
    except ApiException as exc:
        return Answer(exc.status, json.loads(exc.body or "{}"), [])
    return Answer(response.status, json.loads(response.data), response.headers.getlist("Warning"))


def kftrain_validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``kftrain validate -f path --crd-dir <the reference CRDs>``: its exit code and what it printed."""
    capsys.readouterr()
    code = kftrain_main(["validate", "-f", str(path), "--crd-dir", str(reference.CRD_DIR)])
    out = capsys.readouterr()
    return code, (out.err + out.out).strip()


def not_kept(sent: Any, stored: Any, where: str = "") -> list[str]:
    """The paths of ``sent`` that ``stored`` lacks or holds otherwise (what pruning or a coercion changed);
    what the server added (defaults, metadata) is not counted."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return [p for k, v in sent.items() for p in not_kept(v, stored.get(k), f"{where}.{k}")]
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=True)) for p in not_kept(a, b, f"{where}[{i}]")]
    return [] if sent == stored else [where or "."]


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def load(path: Path) -> Manifest:
    manifest: Manifest = yaml.safe_load(path.read_text())
    return manifest


# --- what must be admitted --------------------------------------------------------------------------


def test_examples_cover_every_kind() -> None:
    kinds = {load(p)["kind"] for p in example_files()}
    assert kinds == {"TFJob", "PyTorchJob", "MPIJob", "TrainJob"}


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_is_admitted(
    path: Path, cluster: ControlPlane, custom: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load(path)
    answer = create(cluster, custom, manifest)
    assert not answer.refused, answer.body.get("message")
    assert answer.warnings == []
    assert not_kept(manifest, answer.body) == []
    code, said = kftrain_validate(path, capsys)
    assert code == 0, said


@pytest.mark.parametrize(
    "path",
    sorted(reference.RUNTIMES_DIR.glob("*.yaml"))
    or [pytest.param(None, marks=pytest.mark.skip(reason=f"{reference.RUNTIMES_DIR} is missing"))],
)
def test_trainer_runtime_is_admitted(path: Path, cluster: ControlPlane, custom: Any) -> None:
    """Trainer v2.3.0's own ClusterTrainingRuntimes, the ones the example TrainJob names: its CRDs admit them."""
    manifest = load(path)
    answer = create(cluster, custom, manifest)
    assert not answer.refused, answer.body.get("message")
    assert answer.warnings == []
    assert not_kept(manifest, answer.body) == []


def test_serves_the_pinned_version(cluster: ControlPlane, record_property: Callable[[str, object], None]) -> None:
    """The binaries are the ones testbed/controlplane/go.mod pins."""
    go_mod = (REPO_ROOT / "testbed" / "controlplane" / "go.mod").read_text().split()
    pinned = go_mod[go_mod.index("k8s.io/kubernetes") + 1]
    with cluster.api_client() as api_client:
        assert client.VersionApi(api_client).get_code().git_version == pinned
    record_property("start_s", round(cluster.started_in_s, 2))
    record_property("rss_mib", {name: rss >> 20 for name, rss in cluster.rss_bytes().items()})


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
TF_CONTAINER_PATH = "spec.tfReplicaSpecs.Worker.template.spec.containers[0]"
MPI_WORKER = ("spec", "mpiReplicaSpecs", "Worker")
MPI_CONTAINER = (*MPI_WORKER, "template", "spec", "containers", 0)
MPI_CONTAINER_PATH = "spec.mpiReplicaSpecs.Worker.template.spec.containers[0]"
ENV_TWICE = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
CHIEF = {"name": "chief", "image": "docker.io/kftrain/python-horovod-pytorch-cpu:0.1.0"}
OPERATOR_WEBHOOK = "not in the CRD: the operator's webhook or controller judges it, and none runs here"


@dataclass(frozen=True)
class Bad:
    id: str
    example: str  # examples/manifests/<example>.yaml
    change: Callable[[Manifest], None]
    # False where the CRD allows it: ``why`` says why kftrain refuses it anyway.
    apiserver_refuses: bool = True
    why: str = ""
    strict: bool = False  # create with fieldValidation=Strict
    # Set where the API server refuses and kftrain validate admits: a known gap, run as xfail.
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
    Bad(
        "pytorchjob-container-twice",
        "pytorchjob",
        twice(*PT_WORKER, "template", "spec", "containers"),
        names="spec.pytorchReplicaSpecs.Worker.template.spec.containers[1]",
    ),
    Bad(
        "tfjob-container-twice",
        "tfjob",
        twice(*TF_WORKER, "template", "spec", "containers"),
        names="spec.tfReplicaSpecs.Worker.template.spec.containers[1]",
    ),
    # A container's env: kftrain's own rule (kftrain.job.validate, run with or without CRDs) names the repeat first.
    Bad(
        "tfjob-env-twice", "tfjob", at(*TF_CONTAINER, "env", value=ENV_TWICE), names=f"{TF_CONTAINER_PATH}.env[1].name"
    ),
    Bad(
        "mpijob-container-twice",
        "mpijob",
        twice(*MPI_WORKER, "template", "spec", "containers"),
        names="spec.mpiReplicaSpecs.Worker.template.spec.containers[1]",
    ),
    Bad(
        "mpijob-env-twice",
        "mpijob",
        at(*MPI_CONTAINER, "env", value=ENV_TWICE),
        names=f"{MPI_CONTAINER_PATH}.env[1].name",
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
    # What only kftrain refuses.
    Bad(
        "tfjob-unknown-field",
        "tfjob",
        at("spec", "enableDynamicWorkers", value=True),
        apiserver_refuses=False,
        why="the server's default fieldValidation (Warn) drops an unknown field with a warning "
        "(kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go, fieldValidation)",
    ),
    Bad(
        "pytorchjob-master-replicas-negative",
        "pytorchjob",
        at("spec", "pytorchReplicaSpecs", "Master", "replicas", value=-1),
        apiserver_refuses=False,
        why=f"no minimum, and Master is not the scale subresource's path: {OPERATOR_WEBHOOK}",
    ),
    Bad(
        "pytorchjob-restart-policy-unknown",
        "pytorchjob",
        at(*PT_WORKER, "restartPolicy", value="Sometimes"),
        apiserver_refuses=False,
        why=f"restartPolicy is a free string in training-operator v1.9.0's CRD: {OPERATOR_WEBHOOK}",
    ),
    Bad(
        "tfjob-no-containers",
        "tfjob",
        at(*TF_WORKER, "template", "spec", "containers", value=[]),
        apiserver_refuses=False,
        why=f"the CRD has no minItems on containers: {OPERATOR_WEBHOOK}",
    ),
    Bad(
        "trainjob-num-nodes-negative",
        "trainjob",
        at("spec", "trainer", "numNodes", value=-1),
        apiserver_refuses=False,
        why=f"numNodes has no minimum in Trainer v2.3.0's CRD: {OPERATOR_WEBHOOK}",
        names="spec.trainer.numNodes",
    ),
    Bad(
        "mpijob-slots-negative",
        "mpijob",
        at("spec", "slotsPerWorker", value=-1),
        apiserver_refuses=False,
        why=f"slotsPerWorker has no minimum in mpi-operator v0.8.2's CRD: {OPERATOR_WEBHOOK}",
    ),
    Bad(
        "mpijob-unknown-replica-type",
        "mpijob",
        at("spec", "mpiReplicaSpecs", "Chief", value={"replicas": 1, "template": {"spec": {"containers": [CHIEF]}}}),
        apiserver_refuses=False,
        why=f"mpiReplicaSpecs is a map of any key: {OPERATOR_WEBHOOK}",
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


@pytest.mark.parametrize("bad", bad_params())
def test_bad_input(
    bad: Bad, cluster: ControlPlane, custom: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load(EXAMPLES / f"{bad.example}.yaml")
    manifest["metadata"]["name"] = bad.id  # each its own object: those admitted stay in the namespace
    bad.change(manifest)
    path = tmp_path / f"{bad.id}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))

    answer = create(cluster, custom, manifest, strict=bad.strict)
    if answer.refused != bad.apiserver_refuses:
        said = answer.body.get("message") if answer.refused else f"admitted, warnings {answer.warnings}"
        pytest.fail(f"the API server {'refused' if answer.refused else 'admitted'} it: {said}")
    if answer.refused:
        # Invalid; an unknown field under Strict is a BadRequest
        # (kubernetes@v1.36.3:staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go, FieldValidationStrict).
        assert answer.status == (400 if bad.strict else 422), answer.body
    code, said = kftrain_validate(path, capsys)
    assert code != 0, f"kftrain validate admits what the API server refuses ({answer.body.get('message')}): {said}"
    if bad.names:
        assert f"error: {bad.names}: " in said, said

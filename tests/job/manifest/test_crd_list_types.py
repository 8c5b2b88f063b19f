"""The structural schema's list types, as the API server holds every list to them
(kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go,
ValidateListSetsAndMaps): a list of ``x-kubernetes-list-type: map`` holds each tuple of its
``x-kubernetes-list-map-keys`` once, one of ``set`` each item once. ``CRDSchemas`` (``kftrain validate/launch
--crd-dir``) refuses a repeat in every kind's CRD (the operators' CRDs in /work/shared/reference/crds), naming the
repeat's path and its key, as tests/controlplane/test_admission_bad_input.py finds the real API server does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.cli.app import main as kftrain_main
from kftrain.errors import JobSpecError
from kftrain.job.manifest.schema import CRDSchemas, list_errors
from testbed import reference
from testbed.manifests import container, mpijob_v1, mpijob_v2, pytorchjob, replica, tfjob, training_runtime, trainjob

Manifest = dict[str, Any]
TWICE = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
# A runtime of one replicated job with no pod at all: what each rule reads, and nothing else.
RUNTIME: Manifest = training_runtime(
    {"name": "node", "template": {"spec": {"template": {}}}}, name="rt", kind="ClusterTrainingRuntime"
)


def worker_pod(kind: str, build: Callable[..., Manifest], key: str, name: str) -> tuple[str, Manifest, str]:
    """(kind, a job of it whose Worker pod has one container ``name``, the path of that pod spec)."""
    # Each kind's fixed replica beside the Worker, so that the job loads (kftrain validate loads it first).
    fixed = {"PyTorchJob": {"Master": replica(1, name)}, "MPIJob": {"Launcher": replica(1, "launcher")}}
    replicas = fixed.get(kind.split()[0], {})
    job = build({**replicas, "Worker": replica(1, name)})
    return kind, job, f"spec.{key}.Worker.template.spec"


PODS = [
    worker_pod("TFJob", tfjob, "tfReplicaSpecs", "tensorflow"),
    worker_pod("PyTorchJob", pytorchjob, "pytorchReplicaSpecs", "pytorch"),
    worker_pod("MPIJob v2beta1", mpijob_v2, "mpiReplicaSpecs", "worker"),
    worker_pod("MPIJob v1", mpijob_v1, "mpiReplicaSpecs", "worker"),
]


def at(manifest: Manifest, path: str) -> Any:
    """The value at the dotted ``path`` of ``manifest`` (``name[i]`` indexes a list)."""
    node: Any = manifest
    for part in path.split("."):
        name, _, index = part.partition("[")
        node = node[name]
        if index:
            node = node[int(index.rstrip("]"))]
    return node


def changed(manifest: Manifest, path: str, field: str, value: Any) -> Manifest:
    out = copy.deepcopy(manifest)
    at(out, path)[field] = copy.deepcopy(value)
    return out


def pod_cases() -> list[Any]:
    cases = []
    for kind, job, pod in PODS:
        first = at(job, pod)["containers"][0]
        c0 = f"{pod}.containers[0]"
        cases += [
            (kind, "container twice", changed(job, pod, "containers", [first, first]), f"{pod}.containers[1]", "name"),
            (kind, "env twice", changed(job, c0, "env", TWICE), f"{c0}.env[1]", '{"name": "A"}'),
            (
                kind,
                "init container env twice",
                changed(job, pod, "initContainers", [container("init", env=TWICE)]),
                f"{pod}.initContainers[0].env[1]",
                '{"name": "A"}',
            ),
            (
                kind,
                "volume twice",
                changed(job, pod, "volumes", [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
                f"{pod}.volumes[1]",
                '{"name": "v"}',
            ),
            # (containerPort, protocol) keys the ports, protocol defaulted to TCP before the keys are compared.
            (
                kind,
                "port twice once protocol is defaulted",
                changed(job, c0, "ports", [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]),
                f"{c0}.ports[1]",
                '{"containerPort": 80, "protocol": "TCP"}',
            ),
        ]
    return cases


TRAINJOB = trainjob(trainer={"numNodes": 1})
PATCH = {"manager": "example.com/a", "time": "2025-01-01T00:00:00Z"}
REFUSED = [
    *pod_cases(),
    (
        "TrainJob",
        "trainer env twice",
        changed(TRAINJOB, "spec.trainer", "env", TWICE),
        "spec.trainer.env[1]",
        '{"name": "A"}',
    ),
    (
        "TrainJob",
        "dataset initializer env twice",
        changed(TRAINJOB, "spec", "initializer", {"dataset": {"env": TWICE}}),
        "spec.initializer.dataset.env[1]",
        '{"name": "A"}',
    ),
    (
        "TrainJob",
        "runtime patch manager twice",
        changed(TRAINJOB, "spec", "runtimePatches", [PATCH, PATCH]),
        "spec.runtimePatches[1]",
        '{"manager": "example.com/a"}',
    ),
    (
        "ClusterTrainingRuntime",
        "envInjection container twice (a set)",
        changed(
            RUNTIME,
            "spec.mlPolicy.torch",
            "envInjection",
            {"targets": [{"jobName": "node", "containerNames": ["side", "side"]}]},
        ),
        "spec.mlPolicy.torch.envInjection.targets[0].containerNames[1]",
        'duplicate value "side"',
    ),
]


@pytest.mark.parametrize(
    ("manifest", "field", "shown"), [c[2:] for c in REFUSED], ids=[f"{c[0]}: {c[1]}" for c in REFUSED]
)
def test_a_repeated_key_is_refused_naming_the_repeat_and_its_key(
    crd_schemas: CRDSchemas, manifest: Manifest, field: str, shown: str
) -> None:
    errors = crd_schemas.errors(manifest)
    repeats = [e for e in errors if "duplicate value" in e]
    assert len(repeats) == 1 and repeats[0].startswith(f"{field}: duplicate value "), errors
    assert shown in repeats[0] and "\n" not in repeats[0]
    with pytest.raises(JobSpecError) as caught:
        crd_schemas.validate(manifest)
    assert caught.value.field == field


ACCEPTED = [
    ("TFJob", "two env names", changed(PODS[0][1], f"{PODS[0][2]}.containers[0]", "env", [TWICE[0], {"name": "B"}])),
    (
        "PyTorchJob",
        "one port over two protocols",
        changed(
            PODS[1][1],
            f"{PODS[1][2]}.containers[0]",
            "ports",
            [{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"}],
        ),
    ),
    (
        "MPIJob v2beta1",
        "two containers",
        changed(PODS[2][1], PODS[2][2], "containers", [container("worker"), container("side")]),
    ),
    # The same env name in two containers, and in two replica types: each list is its own.
    (
        "MPIJob v1",
        "one env name in two containers",
        changed(
            PODS[3][1], PODS[3][2], "containers", [container("worker", env=TWICE[:1]), container("b", env=TWICE[:1])]
        ),
    ),
    ("TrainJob", "two env names", changed(TRAINJOB, "spec.trainer", "env", [TWICE[0], {"name": "B"}])),
]


@pytest.mark.parametrize("manifest", [c[2] for c in ACCEPTED], ids=[f"{c[0]}: {c[1]}" for c in ACCEPTED])
def test_keys_each_once_are_accepted(crd_schemas: CRDSchemas, manifest: Manifest) -> None:
    assert crd_schemas.errors(manifest) == []


# --- the API server's comparisons, on a schema of every list type -------------------------------------------------

SET: Manifest = {"type": "array", "x-kubernetes-list-type": "set", "items": {}}
SCHEMA: Manifest = {
    "type": "object",
    "properties": {
        "set": SET,
        "byName": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {}}},
        },
        "byPair": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["a", "b"],
            "items": {"type": "object", "properties": {"a": {}, "b": {}}},
        },
        "atomic": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {}},
        "nested": {"type": "object", "additionalProperties": SET},
    },
}

COMPARED = [
    ("scalars repeated", {"set": ["x", "y", "x"]}, ['set[2]: duplicate value "x"']),
    # Go's == on the decoded JSON: an integer, a float and a boolean are three values.
    ("1, 1.0 and true differ", {"set": [1, 1.0, True]}, []),
    # An object is compared by its JSON (json.Marshal writes 1.0 as 1).
    (
        "objects by their JSON",
        {"set": [{"a": 1, "b": 2}, {"b": 2, "a": 1.0}]},
        ['set[1]: duplicate value {"a": 1.0, "b": 2}'],
    ),
    ("a third repeat adds no error", {"set": ["x", "x", "x"]}, ['set[1]: duplicate value "x"']),
    ("atomic lists may repeat", {"atomic": ["x", "x"]}, []),
    ("a map's values are lists too", {"nested": {"k": ["x", "x"]}}, ['nested.k[1]: duplicate value "x"']),
    ("one key, repeated", {"byName": [{"name": "a"}, {"name": "a"}]}, ['byName[1]: duplicate value {"name": "a"}']),
    # One key field: its values compared as scalars, so 1 and 1.0 are two keys.
    ("one key: 1 and 1.0 differ", {"byName": [{"name": 1}, {"name": 1.0}]}, []),
    ("items without the key share one", {"byName": [{}, {}]}, ["byName[1]: duplicate value {}"]),
    ("a missing key is not a null one", {"byName": [{}, {"name": None}]}, []),
    (
        "two keys, the pair repeated",
        {"byPair": [{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"b": 2, "a": 1}]},
        ['byPair[2]: duplicate value {"a": 1, "b": 2}'],
    ),
    (
        "an item not an object",
        {"byName": [{"name": "a"}, "a"]},
        ["byName[1]: must be an object for an array of list-type map"],
    ),
]


@pytest.mark.parametrize(("value", "expected"), [c[1:] for c in COMPARED], ids=[c[0] for c in COMPARED])
def test_list_items_are_compared_as_the_api_server_compares_them(value: Manifest, expected: list[str]) -> None:
    # Each line up to where it says which item came first (the next test reads that part).
    assert [e.partition(" (also ")[0] for e in list_errors(SCHEMA, value)] == expected


def test_the_message_says_where_the_first_is_and_what_keys_the_list() -> None:
    assert list_errors(SCHEMA, {"byPair": [{"a": 1, "b": 2}, {"a": 1, "b": 2}]}) == [
        'byPair[1]: duplicate value {"a": 1, "b": 2} (also byPair[0]; the list is keyed by a, b)'
    ]
    assert list_errors(SCHEMA, {"set": ["x", "x"]}) == ['set[1]: duplicate value "x" (also set[0]; the list is a set)']


TWICE_IN_A_FILE = [c for c in REFUSED if c[1] in ("container twice", "trainer env twice")]


@pytest.mark.parametrize(("manifest", "field"), [c[2:4] for c in TWICE_IN_A_FILE], ids=[c[0] for c in TWICE_IN_A_FILE])
def test_kftrain_validate_refuses_a_repeated_key_naming_it(
    manifest: Manifest, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a manifest file gets from ``kftrain validate --crd-dir``: the one line naming the repeat."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code = kftrain_main(["validate", "-f", str(path), "--crd-dir", str(reference.required(reference.CRD_DIR))])
    said = capsys.readouterr().err.strip()
    assert code != 0
    assert (
        said.startswith(f"kftrain: error: {field}: rejected by the CRD schema: duplicate value {{") and "\n" not in said
    )

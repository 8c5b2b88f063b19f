"""The fake API server's rules for a stored custom resource (testbed/fake_k8s/rules.py), case by case; the
control-plane tier compares them with kube-apiserver's answers (tests/controlplane/test_fake_api_server.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.job.manifest.schema import CRDVersion
from testbed.fake_k8s.rules import name_problem, prepared_for_create, prepared_for_update, pruned, unsupported_field

OBJ = {"type": "object"}
STR = {"type": "string"}

PRUNING = [
    pytest.param(
        {"properties": {"spec": {"type": "object", "properties": {"a": STR}}}},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {"a": "1", "b": "2"}, "extra": 1},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {"a": "1"}},
        id="unknown fields go, the root's apiVersion, kind and metadata stay",
    ),
    pytest.param(
        {
            "properties": {
                "spec": {"type": "object", "additionalProperties": {"type": "object", "properties": {"a": STR}}}
            }
        },
        {"spec": {"one": {"a": "1", "b": "2"}, "two": {"c": "3"}}},
        {"spec": {"one": {"a": "1"}, "two": {}}},
        id="a map's values are pruned by its value schema",
    ),
    pytest.param(
        {"properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"a": STR}}}}},
        {"items": [{"a": "1", "b": "2"}, {"b": "3"}]},
        {"items": [{"a": "1"}, {}]},
        id="a list's items are pruned by its item schema",
    ),
    pytest.param(
        {"properties": {"free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
        {"free": {"anything": {"deep": 1}}},
        {"free": {"anything": {"deep": 1}}},
        id="x-kubernetes-preserve-unknown-fields keeps what it does not know",
    ),
    pytest.param(
        {
            "properties": {
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "object", "properties": {"a": STR}}},
                }
            }
        },
        {"free": {"other": 1, "known": {"a": "1", "b": "2"}}},
        {"free": {"other": 1, "known": {"a": "1"}}},
        id="under x-kubernetes-preserve-unknown-fields the known fields are still pruned",
    ),
    pytest.param(
        {"properties": {"template": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}}}},
        {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}},
        {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}},
        id="an embedded resource keeps its apiVersion, kind and metadata",
    ),
    pytest.param(
        {"properties": {"spec": {"type": "object", "properties": {"metadata": OBJ}}}},
        {"spec": {"metadata": {"labels": {"a": "b"}}}},
        {"spec": {"metadata": {}}},
        id="metadata below the root with no properties is pruned like any object",
    ),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), PRUNING)
def test_pruned(schema: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any]) -> None:
    before = repr(obj)
    assert pruned(obj, {"type": "object", **schema}) == expected
    assert repr(obj) == before  # a copy: the request's body is not changed


CRD = CRDVersion(
    group="g",
    kind="K",
    plural="ks",
    version="v1",
    schema={"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": STR}}, "status": OBJ}},
    status_subresource=True,
)


def test_a_create_sets_no_status_and_generation_one() -> None:
    made = prepared_for_create({"metadata": {"name": "x", "generation": 7}, "spec": {"a": "1"}, "status": {}}, CRD)
    assert made == {"metadata": {"name": "x", "generation": 1}, "spec": {"a": "1"}}


@pytest.mark.parametrize(
    ("new", "generation", "status"),
    [
        ({"metadata": {"generation": 3, "labels": {"l": "v"}}, "spec": {"a": "1"}, "status": {"x": 1}}, 3, {"x": 1}),
        ({"metadata": {"generation": 3}, "spec": {"a": "2"}, "status": {"x": 1}}, 4, {"x": 1}),
        ({"metadata": {"generation": 3}, "spec": {"a": "1"}, "status": {"y": 2}}, 3, {"x": 1}),
    ],
    ids=["metadata only: same generation", "the spec: one more", "the status: kept as it was, same generation"],
)
def test_an_update(new: dict[str, Any], generation: int, status: dict[str, Any]) -> None:
    old = {"metadata": {"generation": 3}, "spec": {"a": "1"}, "status": {"x": 1}}
    out = prepared_for_update(new, old, CRD)
    assert out["metadata"]["generation"] == generation and out["status"] == status


@pytest.mark.parametrize(
    ("name", "refused"),
    [("digits-train", False), ("a.b-c", False), ("Digits", True), ("-a", True), ("a_b", True), ("a" * 254, True)],
)
def test_names(name: str, refused: bool) -> None:
    assert (name_problem(name) is not None) is refused


@pytest.mark.parametrize(
    ("plural", "fields", "bad"),
    [
        ("events", ["involvedObject.name", "type", "reason"], None),
        ("events", ["message"], "message"),
        ("pods", ["status.phase", "spec.nodeName"], None),
        ("pods", ["metadata.labels"], "metadata.labels"),
        ("pytorchjobs", ["metadata.name"], None),
        ("pytorchjobs", ["spec.runPolicy.suspend"], "spec.runPolicy.suspend"),
    ],
)
def test_field_selectors(plural: str, fields: list[str], bad: str | None) -> None:
    assert unsupported_field(plural, fields) == bad

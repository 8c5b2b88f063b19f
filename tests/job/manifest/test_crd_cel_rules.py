"""The CRDs' CEL validation rules (``x-kubernetes-validations``), as they ship in Kubeflow Trainer v2.3.0's CRDs
(/work/shared/reference/crds), are evaluated with a CEL implementation wherever the schema applies them:
``CRDSchemas`` (``kftrain validate/launch --crd-dir``) and the fake API server refuse what the real one refuses,
and a create never evaluates a transition rule (``oldSelf``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kftrain.job.manifest.schema import CRDSchemas
from testbed.manifests import training_runtime

TRAINJOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tj"},
    "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
}
# A runtime of one replicated job with no pod at all: what each rule reads, and nothing else.
RUNTIME: dict[str, Any] = training_runtime(
    {"name": "node", "template": {"spec": {"template": {}}}}, name="rt", kind="TrainingRuntime"
)


def changed(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with ``value`` at the dotted ``path`` (``...`` deletes the key)."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return out


def test_the_trainer_crds_carry_the_rules_evaluated_here(crd_schemas: CRDSchemas) -> None:
    crd = crd_schemas.get("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert crd is not None
    rules = {r.rule for r in crd.rules}
    assert "size(self.metadata.name) <= 63" in rules
    assert "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']" in rules
    assert not any("oldSelf" in r for r in rules)  # transition rules: updates only


BROKEN = [
    (changed(TRAINJOB, "metadata.name", "a" * 64), "<root>", "metadata.name must be no more than 63 characters"),
    (changed(TRAINJOB, "metadata.name", "9lives"), "<root>", "metadata.name must match RFC 1035 DNS label format"),
    (changed(TRAINJOB, "spec.managedBy", "someone-else"), "spec.managedBy", "ManagedBy must be"),
    (
        changed(TRAINJOB, "spec.initializer", {"dataset": {"storageUri": "no-scheme"}}),
        "spec.initializer.dataset.storageUri",
        "storageUri may be empty, or it must be a valid",
    ),
    (changed(RUNTIME, "spec.mlPolicy.mpi", {}), "spec.mlPolicy", "Only one of the policy can be configured"),
    (
        changed(
            RUNTIME,
            "spec.mlPolicy.torch",
            {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["x", "node"]}]}},
        ),
        "spec.mlPolicy.torch.envInjection.targets[0].containerNames",
        "containerNames must not include the main",
    ),
]


@pytest.mark.parametrize(("manifest", "field", "message"), BROKEN, ids=[f"{m['kind']}:{f}" for m, f, _ in BROKEN])
def test_a_manifest_breaking_a_crd_rule_is_refused_with_the_rules_message(
    crd_schemas: CRDSchemas, manifest: dict[str, Any], field: str, message: str
) -> None:
    errors = crd_schemas.errors(manifest)
    assert any(e.startswith(f"{field}: {message}") for e in errors), errors


@pytest.mark.parametrize(
    "manifest",
    [
        TRAINJOB,
        changed(TRAINJOB, "spec.managedBy", "kueue.x-k8s.io/multikueue"),
        changed(TRAINJOB, "spec.initializer", {"dataset": {"storageUri": "hf://org/data"}}),
        changed(TRAINJOB, "spec.initializer", {"dataset": {"storageUri": ""}}),
        RUNTIME,
        changed(
            RUNTIME,
            "spec.mlPolicy.torch",
            {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["sidecar"]}]}},
        ),
    ],
)
def test_a_manifest_keeping_every_rule_is_accepted(crd_schemas: CRDSchemas, manifest: dict[str, Any]) -> None:
    assert crd_schemas.errors(manifest) == []


def test_the_fake_api_server_refuses_what_a_rule_refuses(kube: Any) -> None:
    api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=kube.url)))
    with pytest.raises(ApiException) as exc:
        api.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", changed(TRAINJOB, "spec.managedBy", "me")
        )
    assert exc.value.status == 422 and "ManagedBy must be" in str(exc.value.body)
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", TRAINJOB)
    assert [j["metadata"]["name"] for j in kube.jobs_of("trainjobs")] == ["tj"]

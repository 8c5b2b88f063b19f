"""The exports' KServe manifests as a real kube-apiserver with KServe v0.20.0's InferenceService CRD admits them
(testbed/kserve_crd.py; no KServe controller or webhook running): the classical export's InferenceService (Triton, TF
Serving) with the ServiceAccount naming its store's endpoint, and the language model's (merged, or the adapter kept
for vLLM), each created as written, with strict field validation: admitted, no warning, nothing pruned. A broken
one is refused by the server's own schema check, naming the field (the CRD has no x-kubernetes-validations rule)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kftrain.llm import export as llm_export
from kftrain.models import kserve
from testbed import kserve_crd
from testbed.controlplane import suite
from testbed.controlplane.admission import create, not_kept
from testbed.controlplane.cluster import BUILD_HINT, ControlPlane, control_plane, missing_binaries

pytestmark = suite.MARKS

NAMESPACE = "kftrain-admission-kserve"
ENDPOINT = "http://minio-service.kubeflow:9000"  # KFP's MinIO: the exports then write a ServiceAccount


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    """etcd and kube-apiserver with KServe's CRD installed and Established (a skip naming what to run without it,
    or without the binaries)."""
    crd = kserve_crd.crd_file()
    missing = missing_binaries()
    if missing:
        pytest.skip(f"control plane not built ({', '.join(missing)} missing): run `{BUILD_HINT}`")
    with control_plane(crd_files=[crd]) as plane:
        yield plane


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Iterator[Any]:
    yield from suite.admin_with_namespace(cluster, NAMESPACE)


def classical(target: str) -> list[dict[str, Any]]:
    """The classical export's kserve/inferenceservice.yaml for a ``minio://`` output, read back."""
    name = f"cancer-{target}"
    account = kserve.service_account(f"{name}-storage", ENDPOINT)  # as export_model names it
    uri = kserve.storage_uri("minio://mlpipeline/run/exported/triton")
    service = kserve.inference_service(name, target, uri, account["metadata"]["name"])
    return list(yaml.safe_load_all(kserve.manifest_yaml(service, account)))


def language(keep: bool, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The language model's export's kserve/inferenceservice.yaml for a ``minio://`` output, read back."""
    monkeypatch.setenv("MINIO_ENDPOINT", ENDPOINT)
    name = "rev-kept" if keep else "rev-merged"
    service, account = llm_export.inference_service(name, "minio://mlpipeline/run/exported", keep)
    written = llm_export.LanguageExport(name, "lora", not keep, inference_service=service, service_account=account)
    return list(yaml.safe_load_all(written.manifest()))


def apply(cluster: ControlPlane, api: Any, documents: list[dict[str, Any]]) -> None:
    """Create each document as ``kubectl apply`` of the file would, strictly; each admitted as written."""
    for doc in documents:
        if doc["kind"] == "ServiceAccount":
            response = client.CoreV1Api(api).create_namespaced_service_account(
                NAMESPACE, doc, field_validation="Strict", _preload_content=False
            )
            assert response.status == 201 and response.headers.getlist("Warning") == []
            continue
        answer = create(cluster, client.CustomObjectsApi(api), doc, NAMESPACE, strict=True)
        assert not answer.refused, answer.body.get("message")
        assert answer.warnings == []
        assert not_kept(doc, answer.body) == []


@pytest.mark.parametrize("target", ["triton", "tfserving"])
def test_the_classical_exports_service_and_account_are_admitted(target: str, cluster: ControlPlane, api: Any) -> None:
    documents = classical(target)
    assert [d["kind"] for d in documents] == ["InferenceService", "ServiceAccount"]
    apply(cluster, api, documents)


@pytest.mark.parametrize("keep", [False, True])
def test_the_language_models_service_and_account_are_admitted(
    keep: bool, cluster: ControlPlane, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    documents = language(keep, monkeypatch)
    assert [d["kind"] for d in documents] == ["InferenceService", "ServiceAccount"]
    apply(cluster, api, documents)


@pytest.mark.parametrize("field", sorted(kserve_crd.BROKEN_FIELDS))
def test_a_broken_inference_service_is_refused_by_the_api_server(
    field: str, cluster: ControlPlane, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = kserve_crd.broken(language(True, monkeypatch)[0], field)
    service["metadata"]["name"] = "broken"
    answer = create(cluster, client.CustomObjectsApi(api), service, NAMESPACE)
    assert answer.status == 422, answer.body
    assert f" {field}" in answer.body["message"], answer.body["message"]  # the server names modelFormat.name
    assert kserve_crd.schemas().errors(service), "kftrain's check of the CRD admits what the API server refuses"


def test_a_service_account_of_a_bad_name_is_refused_by_the_api_server(api: Any) -> None:
    account = classical("triton")[1]
    account["metadata"]["name"] = "Cancer_storage"
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_service_account(NAMESPACE, account)
    assert refused.value.status == 422 and "metadata.name" in str(refused.value.body)

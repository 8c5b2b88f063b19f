"""KServe's InferenceService as the classical export writes it (Triton or TF Serving, with or without the
ServiceAccount naming a store's endpoint), checked against KServe v0.20.0's CRD (testbed/kserve_crd.py)."""

from __future__ import annotations

import pytest
import yaml

from kftrain.models import kserve
from testbed import kserve_crd


def written(target: str, endpoint: str) -> list[dict]:
    """The export's kserve/inferenceservice.yaml, read back: the InferenceService, then its ServiceAccount if any."""
    account = kserve.service_account("cancer-storage", endpoint) if endpoint else {}
    name = account.get("metadata", {}).get("name", "")
    service = kserve.inference_service("cancer", target, kserve.storage_uri("minio://b/run/exported/triton"), name)
    return list(yaml.safe_load_all(kserve.manifest_yaml(service, *([account] if account else []))))


@pytest.mark.parametrize("target", ["triton", "tfserving"])
@pytest.mark.parametrize("endpoint", ["", "http://minio-service.kubeflow:9000"])
def test_the_inference_service_is_valid_against_kserves_crd(target, endpoint):
    service, *account = written(target, endpoint)
    assert (service["apiVersion"], service["kind"]) == (kserve_crd.API_VERSION, kserve_crd.KIND)
    assert kserve_crd.schemas().errors(service) == []
    assert service["spec"]["predictor"].get("serviceAccountName", "") == (
        account[0]["metadata"]["name"] if account else ""
    )


@pytest.mark.parametrize("field", sorted(kserve_crd.BROKEN_FIELDS))
def test_a_broken_inference_service_is_refused_by_kserves_crd(field):
    service, _ = written("triton", "http://minio-service.kubeflow:9000")
    errors = kserve_crd.schemas().errors(kserve_crd.broken(service, field))
    assert errors and errors[0].startswith(f"{field}:"), errors

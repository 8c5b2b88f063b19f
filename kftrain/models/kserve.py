"""How KServe serves an exported model: its ``InferenceService``, and the ServiceAccount that pulls it from a store.

Both the classical export (:mod:`kftrain.steps.export`: Triton, TF Serving) and the language-model export
(:mod:`kftrain.llm.export`: Hugging Face) write these manifests; the model name names the InferenceService. Every
value reaches the manifest through ``yaml.safe_dump``. An export in an S3 store at an endpoint of its own (KFP's
``minio://``) is served from ``s3://`` through a ServiceAccount naming that endpoint and the user's Secret.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from kftrain.errors import ExportError
from kftrain.storage.uri import split_uri

# A Kubernetes name (DNS-1123 label): KServe names its services and pods after the InferenceService.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,43}[a-z0-9])?$")
# The user's Secret holding the store's keys under KServe's names, awsAccessKeyID and awsSecretAccessKey
# (kserve/kserve@v0.20.0:pkg/credentials/s3/s3_secret.go:33-34); its values never reach a manifest.
STORAGE_SECRET = "kftrain-s3"
# Where KServe's storage initializer reads an S3 endpoint and whether it is HTTPS
# (kserve/kserve@v0.20.0:pkg/credentials/s3/s3_secret.go:62,65).
S3_ENDPOINT, S3_USE_HTTPS = "serving.kserve.io/s3-endpoint", "serving.kserve.io/s3-usehttps"


def check_model_name(name: str) -> str:
    if not NAME.match(name):
        raise ExportError(
            f"model_name {name!r}: use lowercase letters, digits and '-', starting and ending with a letter or "
            "digit, at most 45 characters (it names the Triton model and the KServe InferenceService)"
        )
    return name


def storage_uri(uri: str) -> str:
    """``uri`` as KServe's storage initializer downloads it: ``minio://`` and ``s3a://`` as ``s3://``, which it knows
    and they are not (kserve/kserve@v0.20.0:python/storage/kserve_storage/kserve_storage.py:47-64, the schemes;
    206-226, the dispatch); ``gs://`` and local paths as they are."""
    scheme, path = split_uri(uri)
    return f"s3://{path}" if scheme == "s3" else uri


def service_account(name: str, endpoint_url: str) -> dict[str, Any]:
    """The ServiceAccount a predictor pulls ``s3://`` from a store at ``endpoint_url`` with: it names the user's
    :data:`STORAGE_SECRET`, whose keys KServe mounts (kserve/kserve@v0.20.0:
    pkg/credentials/service_account_credentials.go:261-262, 291-293), and carries the endpoint as KServe's
    annotations. KServe reads those annotations from the Secret (s3_secret.go:106), from the ServiceAccount only
    beside an IRSA role (service_account_credentials.go:240-245): the Secret holds them too, as keys S3_ENDPOINT
    and S3_USE_HTTPS (s3/utils.go:131-139; docs/cluster.md)."""
    https = endpoint_url.startswith("https://")
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "kftrain"},
            "annotations": {S3_ENDPOINT: endpoint_url.split("://", 1)[-1], S3_USE_HTTPS: "1" if https else "0"},
        },
        "secrets": [{"name": STORAGE_SECRET}],
    }


def inference_service(name: str, target: str, storage_uri: str, account: str = "") -> dict[str, Any]:
    """A KServe ``InferenceService`` serving ``storage_uri``: a Triton repository, or a TF Serving model folder;
    ``account``: the predictor's ServiceAccount ("" for the namespace's default)."""
    if target == "tfserving":
        model = {"modelFormat": {"name": "tensorflow"}, "storageUri": storage_uri}
    else:
        model = {
            "modelFormat": {"name": "triton"},
            "runtime": "kserve-tritonserver",
            "protocolVersion": "v2",
            "storageUri": storage_uri,
        }
    return predictor_service(name, model, account)


def predictor_service(name: str, model: dict[str, Any], account: str = "") -> dict[str, Any]:
    """A KServe ``InferenceService`` named ``name`` whose predictor is ``model`` (its ``modelFormat``,
    ``storageUri``...), pulled with ``account`` ("" for the namespace's default ServiceAccount)."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kftrain"}},
        "spec": {"predictor": {"model": model, **({"serviceAccountName": account} if account else {})}},
    }


def manifest_yaml(*documents: dict[str, Any]) -> str:
    """One YAML stream, applied with one ``kubectl apply -f``."""
    return yaml.safe_dump_all(documents, sort_keys=False)

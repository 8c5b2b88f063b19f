"""What a test namespace on the control plane needs before a job runs in it: the namespace (with its labels: Pod
Security Admission reads them), its ``default`` ServiceAccount, and Trainer's ClusterTrainingRuntimes."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed import reference

ACCOUNT_WAIT_S = 30.0


def ready_namespace(api_client: Any, name: str, labels: Mapping[str, str] | None = None) -> None:
    """Create namespace ``name`` and wait for its ``default`` ServiceAccount: the ServiceAccount admission plugin
    refuses a pod whose account does not exist yet, and kube-controller-manager's serviceaccount controller makes
    ``default`` soon after the namespace (kubernetes@v1.36.3:plugin/pkg/admission/serviceaccount/admission.go)."""
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": dict(labels or {})}})
    deadline = time.monotonic() + ACCOUNT_WAIT_S
    while not core.list_namespaced_service_account(name).items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name}"
        time.sleep(0.1)


def install_cluster_runtimes(api_client: Any) -> None:
    """Trainer's ClusterTrainingRuntimes of the reference (``../shared/reference/runtimes``), each once."""
    custom = client.CustomObjectsApi(api_client)
    for path in sorted(reference.required(reference.RUNTIMES_DIR).glob("*.yaml")):
        runtime = yaml.safe_load(path.read_text())
        group, version = runtime["apiVersion"].split("/")
        try:
            custom.create_cluster_custom_object(group, version, "clustertrainingruntimes", runtime)
        except ApiException as exc:
            if exc.status != 409:  # installed by an earlier module on this control plane
                raise

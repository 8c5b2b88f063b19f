"""A pod reaches kube-apiserver as a pod on a cluster does: its ServiceAccount token and the `kube-root-ca.crt`
ConfigMap mounted (kube-controller-manager's root-ca publisher), the `kubernetes` Service's ClusterIP taken to
kube-apiserver by kube-proxy's rules, and the Python client's in-cluster config, allowed what its Role grants."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane import node_pods
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.node_proxy import kubernetes_service_ip

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"
ACCOUNT = "pod-lister"
PROGRAM = """
import os
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
config.load_incluster_config()
print("host", os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
api = client.CoreV1Api()
print("pods", sorted(p.metadata.name for p in api.list_namespaced_pod("default").items))
try:
    api.list_namespaced_secret("default")
except ApiException as e:
    print("secrets", e.status)
"""


def _account(node_cluster: ControlPlane) -> None:
    with node_cluster.api_client() as api_client:
        core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
        core.create_namespaced_service_account(NS, {"metadata": {"name": ACCOUNT}})
        rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
        rbac.create_namespaced_role(NS, {"metadata": {"name": ACCOUNT}, "rules": [rule]})
        binding = {
            "metadata": {"name": ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}],
        }
        rbac.create_namespaced_role_binding(NS, binding)


def test_a_pod_lists_pods_with_in_cluster_config(node_cluster: ControlPlane, core: Any) -> None:
    core.read_namespaced_config_map("kube-root-ca.crt", NS)  # published by kube-controller-manager
    _account(node_cluster)
    manifest = node_pods.pod(
        "in-cluster",
        node_pods.LAUNCH_IMAGE,
        ["python", "-c", PROGRAM],
        serviceAccountName=ACCOUNT,
        automountServiceAccountToken=True,
    )
    core.create_namespaced_pod(NS, manifest)
    pod, _ = node_pods.wait_for(core, "in-cluster", NS, node_pods.ended)
    log = core.read_namespaced_pod_log("in-cluster", NS)
    assert pod.status.phase == "Succeeded", log
    lines = log.splitlines()
    assert f"host {kubernetes_service_ip()} 443" in lines, log
    assert any(line.startswith("pods [") and "'in-cluster'" in line for line in lines), log
    # The Role grants pods only: the request is the ServiceAccount's, not the admin's.
    assert "secrets 403" in lines, log

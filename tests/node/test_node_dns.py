"""Cluster DNS on the real node (CoreDNS serving cluster.local from kube-apiserver, node_dns.py): a pod resolves the
`kubernetes` Service by its short and full names to its ClusterIP, a headless Service to the pod behind it (what a
PyTorchJob's replicas look their master up by), and nothing outside the cluster (nothing is forwarded)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed.controlplane import node_pods
from testbed.controlplane.node_proxy import kubernetes_service_ip

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"
PROGRAM = """
import json, socket, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = socket.gethostbyname(name)
    except OSError as e:
        found[name] = f"error: {e.__class__.__name__}"
print("found", json.dumps(found))  # a bare JSON log is parsed by the client
"""


def test_a_pod_resolves_services_and_nothing_outside(core: Any) -> None:
    labels = {"kftrain-dns-test": "peer"}
    peer = node_pods.pod("dns-peer", node_pods.LAUNCH_IMAGE, ["sleep", "300"], terminationGracePeriodSeconds=0)
    peer["metadata"]["labels"] = labels
    core.create_namespaced_pod(NS, peer)
    core.create_namespaced_service(
        NS, {"metadata": {"name": "peer"}, "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]}}
    )
    peer_pod, _ = node_pods.wait_for(core, "dns-peer", NS, node_pods.running)
    names = ["kubernetes", "kubernetes.default.svc.cluster.local", "peer", "peer.default.svc", "example.com"]
    core.create_namespaced_pod(NS, node_pods.pod("dns", node_pods.LAUNCH_IMAGE, ["python", "-c", PROGRAM, *names]))
    pod, _ = node_pods.wait_for(core, "dns", NS, node_pods.ended)
    log = core.read_namespaced_pod_log("dns", NS)
    assert pod.status.phase == "Succeeded", log
    found = json.loads(log.strip().splitlines()[-1].removeprefix("found "))
    service_ip = kubernetes_service_ip()
    assert found["kubernetes"] == found["kubernetes.default.svc.cluster.local"] == service_ip, found
    assert found["peer"] == found["peer.default.svc"] == peer_pod.status.pod_ip, found
    assert found["example.com"].startswith("error"), found

"""Cluster DNS on the node: CoreDNS (built from the Go module proxy by build.sh) as a host process on the node's bridge
address, serving ``cluster.local`` from kube-apiserver with its kubernetes plugin; the kubelet gives every pod that
address as its nameserver (``clusterDNS``, node_config.py).

Only the cluster's zones are served: there is no ``forward`` (nothing is resolved off this machine), so any other
name is refused. Its ``ready`` endpoint (loopback) answers 200 once the kubernetes plugin has synced.
"""

from __future__ import annotations

from pathlib import Path

from testbed.controlplane.node_net import Bridge

CLUSTER_DOMAIN = "cluster.local"


def write_corefile(folder: Path, kubeconfig: Path, bridge: Bridge, ready_port: int) -> Path:
    """The Corefile (coredns/coredns@v1.15.0:plugin/kubernetes/README.md, plugin/bind, plugin/ready)."""
    text = f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{
    bind {bridge.address}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
}}
"""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Corefile"
    path.write_text(text)
    return path

"""Service routing on the node: kube-proxy (built from the same k8s.io/kubernetes modules as the kubelet) in iptables
mode, its KubeProxyConfiguration written here, and the route the pods take to a Service address.

A pod's packet to a ClusterIP goes to the node's bridge address (the CNI config routes :data:`SERVICE_CIDR` there,
node_config.py), where kube-proxy's nat rules send it on to an endpoint: for the `kubernetes` Service, kube-apiserver
listening on that same bridge address. kube-proxy is kept from touching what it would tune by default (conntrack
sysctls, route_localnet for NodePorts on loopback, its OOM score); its chains are removed on stop by node_host.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
from pathlib import Path

import yaml

from testbed.controlplane.apiserver import SERVICE_CIDR
from testbed.controlplane.host import ControlPlaneError
from testbed.controlplane.node_images import STORE_CACHE
from testbed.controlplane.node_net import Bridge

__all__ = ["SERVICE_CIDR", "kubernetes_service_ip", "lock_service_routing", "write_kube_proxy_config"]


def lock_service_routing(stack: contextlib.ExitStack) -> None:
    """Hold this machine's Service routing until ``stack`` unwinds, or refuse: two kube-proxies would write the same
    chains (KUBE-SERVICES, and each Service's, named by a hash of its namespace and port name) in the one network
    namespace, and each would undo the other's rules."""
    STORE_CACHE.mkdir(parents=True, exist_ok=True)
    lock = (STORE_CACHE / "kube-proxy.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise ControlPlaneError(
            "another control plane's node runs on this machine (its kube-proxy owns the host's KUBE- chains): "
            "stop it first (make cluster-down)"
        ) from None
    stack.callback(lock.close)


def kubernetes_service_ip() -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the Service range (kubernetes@v1.36.3:
    pkg/controlplane/services.go, ServiceIPRange: the range's first IP is the API server's Service)."""
    return str(ipaddress.ip_network(SERVICE_CIDR).network_address + 1)


def write_kube_proxy_config(
    folder: Path, kubeconfig: Path, node_name: str, bridge: Bridge, healthz_port: int, metrics_port: int
) -> Path:
    """The KubeProxyConfiguration (k8s.io/kube-proxy@v0.36.3:config/v1alpha1/types.go)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": bridge.address,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "mode": "iptables",
        "clusterCIDR": str(bridge.subnet),
        "detectLocalMode": "ClusterCIDR",
        # NodePorts only on the bridge, none on loopback (which needs net.ipv4.conf.all.route_localnet=1).
        "nodePortAddresses": [str(bridge.subnet)],
        "iptables": {"localhostNodePorts": False},
        # 0: leave the host's conntrack table size and timeouts as they are
        # (k8s.io/kube-proxy@v0.36.3:config/v1alpha1/types.go, KubeProxyConntrackConfiguration).
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
        "oomScoreAdj": 0,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path

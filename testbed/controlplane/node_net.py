"""The node's own network: a Linux bridge with a private /24 the fixture creates, holding the node's address (the
kubelet's --node-ip, kube-apiserver's advertised address) and, through the CNI bridge plugin, its pods' addresses.

Nothing is routed off this machine: the bridge has no uplink, the CNI config masquerades nothing (``ipMasq:
false``), and the pods get no nameserver. The host's default gateway (192.0.2.1 on this machine kind) is never an
address the cluster uses.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass

from testbed.controlplane.host import ControlPlaneError
from testbed.controlplane.node_host import LINK_PREFIX

# 10.213.<n>.0/24 for bridge kftrain<n>: a second cluster on the machine (a person's beside the tests') takes the
# next free one.
NETWORK = ipaddress.ip_network("10.213.0.0/16")
MAX_BRIDGES = 16


@dataclass(frozen=True)
class Bridge:
    name: str
    subnet: ipaddress.IPv4Network

    @property
    def address(self) -> str:
        """The bridge's own address, the node's: the first of its subnet (the pods' gateway)."""
        return str(self.subnet.network_address + 1)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def _routed(subnet: ipaddress.IPv4Network) -> bool:
    for line in _ip("-4", "route", "show").stdout.splitlines():
        dest = line.split()[0]
        if dest != "default" and ipaddress.ip_network(dest, strict=False).overlaps(subnet):
            return True
    return False


def create_bridge() -> Bridge:
    """A new bridge, up, holding the first address of a /24 of :data:`NETWORK` no route of the host overlaps."""
    for n in range(MAX_BRIDGES):
        subnet = ipaddress.ip_network(f"{NETWORK.network_address + n * 256}/24")
        bridge = Bridge(f"{LINK_PREFIX}{n}", subnet)
        if _routed(subnet) or _ip("link", "add", bridge.name, "type", "bridge").returncode:
            continue  # taken (by another cluster, or a network of the host's)
        for args in (("addr", "add", f"{bridge.address}/24", "dev", bridge.name), ("link", "set", bridge.name, "up")):
            result = _ip(*args)
            if result.returncode:
                delete_bridge(bridge)
                raise ControlPlaneError(f"ip {' '.join(args)}: {result.stderr.strip()}")
        return bridge
    raise ControlPlaneError(f"no free /24 in {NETWORK} for a node bridge ({MAX_BRIDGES} tried)")


def delete_bridge(bridge: Bridge) -> None:
    """Delete the bridge (the pods' veth ends on it went with their network namespaces)."""
    _ip("link", "delete", bridge.name)

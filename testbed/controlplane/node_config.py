"""The node's configuration files, each written under its folder: containerd's config.toml (its own root, state,
socket, runc root and CNI folder; no registry reachable), the CNI network (bridge + host-local on the node's
bridge, no masquerade) and the kubelet's KubeletConfiguration (cgroup v1, cgroupfs, no iptables chains, nothing
written outside its folder that a setting can keep in).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.controlplane.apiserver import SERVICE_CIDR
from testbed.controlplane.node_dns import CLUSTER_DOMAIN
from testbed.controlplane.node_net import Bridge

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
RUNC = "/usr/sbin/runc"
# The pause image the sandboxes run (node_images.py builds it).
PAUSE_IMAGE = "localhost/kftrain/pause:catatonit"
# Where a registry would be: a port on loopback nothing listens on, so that a pull fails here at once and nothing
# is sent off this machine.
NO_REGISTRY = "http://127.0.0.1:9"


@dataclass(frozen=True)
class NodePaths:
    """The node's folders and files, all under ``root`` (the control plane's folder's ``node``) but containerd's
    root (its images and snapshots), ``store``: a cache kept between runs (node_images.py) or under ``root``."""

    root: Path
    store: Path | None = None

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"


def write_containerd_config(paths: NodePaths) -> Path:
    """containerd 1.6's config (version 2). ``restrict_oom_score_adj``: containerd may not lower its children's OOM
    score below its own, which a process without CAP_SYS_RESOURCE cannot (without it every sandbox fails here,
    "can't get final child's PID from pipe: EOF"). ``netns_mounts_under_state_dir``: the pods' network namespaces
    under its state folder, not /run/netns (containerd@v1.6.20:pkg/cri/config/config.go)."""
    c = paths.containerd
    hosts = c / "certs.d"
    for registry in ("docker.io", "localhost", "ghcr.io", "registry.k8s.io", "quay.io"):
        (hosts / registry).mkdir(parents=True, exist_ok=True)
        (hosts / registry / "hosts.toml").write_text(f'server = "{NO_REGISTRY}"\n')
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""version = 2
root = "{paths.store or c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{paths.socket}"
[ttrpc]
  address = "{c / "ttrpc.sock"}"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{RUNC}"
  Root = "{c / "runc"}"
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{paths.cni_conf}"
  max_conf_num = 1
[{cri}.registry]
  config_path = "{hosts}"
"""
    path = c / "config.toml"
    path.write_text(text)
    return path


def write_cni_config(paths: NodePaths, bridge: Bridge) -> Path:
    """One network: the bridge plugin on the fixture's bridge (which holds the node's address already), host-local
    handing out the rest of its /24 with its state under the node's folder. No gateway, no default route, no
    masquerade: a pod reaches its subnet only (the node's address and other pods) and the Service range through the
    node's address, and IP forwarding, which the plugin
    turns on for a gateway, stays as the host has it (containernetworking/plugins@v1.1.1:plugins/main/bridge/
    bridge.go:540-575, cmdAdd: enableIPForward only under n.IsGW)."""
    subnet = bridge.subnet
    conf = {
        "cniVersion": "1.0.0",
        "name": "kftrain-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge.name,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(subnet), "rangeStart": str(subnet.network_address + 10)}]],
                    "dataDir": str(paths.root / "cni" / "ipam"),
                    # Service addresses by way of the node, where kube-proxy's rules take them (node_proxy.py).
                    "routes": [{"dst": SERVICE_CIDR, "gw": bridge.address}],
                },
            },
            {"type": "loopback"},
        ],
    }
    paths.cni_conf.mkdir(parents=True, exist_ok=True)
    path = paths.cni_conf / "10-kftrain.conflist"
    path.write_text(json.dumps(conf, indent=2))
    return path


def write_kubelet_config(paths: NodePaths, bridge: Bridge, port: int, healthz_port: int) -> Path:
    """The KubeletConfiguration (kubernetes@v1.36.3:staging/src/k8s.io/kubelet/config/v1beta1/types.go)."""
    endpoint = f"unix://{paths.socket}"
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine kind has cgroup v1 (hybrid), which 1.35+ refuses unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        # Served on the bridge only. The API server calls it without a client certificate (logs, exec), so it lets
        # anyone that reaches the bridge in: a test node, never a real one.
        "address": bridge.address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        # Its own folders, not /var/log/pods and /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
        "podLogsDirectory": str(paths.root / "pod-logs"),
        "volumePluginDir": str(paths.root / "volume-plugins"),
        # No KUBE-FIREWALL and canary chains (they are for kube-proxy, which does not run here).
        "makeIPTablesUtilChains": False,
        # The pods' nameserver is the cluster's DNS on the node's address (node_dns.py), and no other: the host's
        # resolv.conf names this VM's gateway.
        "resolvConf": "",
        "clusterDNS": [bridge.address],
        "clusterDomain": CLUSTER_DOMAIN,
        # This machine's disk is shared and often over 85% full: neither image garbage collection nor disk
        # pressure evictions must act on the tests' pods (the defaults: 85% and nodefs.available<10%).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
    }
    path = paths.kubelet / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path

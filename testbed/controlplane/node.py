"""A real node for the control plane: containerd (runc), the kubelet and kube-scheduler, kube-proxy (node_proxy.py)
and CoreDNS (node_dns.py), on a bridge of the fixture's own (node_net.py), configured by node_config.py, its images
moved in by node_images.py.

:meth:`Node.prepare` reads the host (node_host.py) and creates the bridge before kube-apiserver starts, which then
advertises the bridge's address (:attr:`Node.apiserver_flags`); on exit the host is put back and checked.
:meth:`Node.wait_ready` waits for the Node to be Ready and then takes off the ``not-ready`` taint its Node was
admitted with, as the node lifecycle controller does on a cluster (this fixture does not run it). On stop the
pods are deleted (the kubelet stops their containers and tears down their network), then the processes stop, what
containerd left is killed and unmounted, and :func:`~testbed.controlplane.node_host.restore` undoes the rest.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from testbed.controlplane import node_host
from testbed.controlplane.host import ControlPlaneError, Host, Part, Spec, http_ok, unverified_tls
from testbed.controlplane.node_config import (
    NodePaths,
    write_cni_config,
    write_containerd_config,
    write_kubelet_config,
)
from testbed.controlplane.node_dns import write_corefile
from testbed.controlplane.node_images import (
    INIT_IMAGE,
    PAUSE_IMAGE,
    containerd_images,
    ctr,
    ensure_init_image,
    ensure_pause_image,
    import_images,
    lock_store,
)
from testbed.controlplane.node_net import Bridge, create_bridge, delete_bridge
from testbed.controlplane.node_proxy import kubernetes_service_ip, lock_service_routing, write_kube_proxy_config
from testbed.ports import free_port

NODE_NAME = "kftrain-node"
# The taint kube-apiserver's NodeTaint admission plugin puts on every new Node (kubernetes@v1.36.3:plugin/pkg/
# admission/nodetaint/admission.go:63-85), which the node lifecycle controller removes once it is Ready
# (pkg/controller/nodelifecycle/node_lifecycle_controller.go:523, doNoScheduleTaintingPass).
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The pods' deletion on stop: the kubelet kills their containers and releases their addresses first.
DRAIN_TIMEOUT_S = 90.0
BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "coredns")
TOOLS = ("containerd", "runc", "ctr", "podman", "buildah", "ip", "iptables", "nft")


class Node(Part):
    name = "node"
    processes = ("containerd", "kubelet", "kube-scheduler", "kube-proxy", "coredns")

    def __init__(self, binaries: Path, kubeconfig: Path, images: Sequence[str] = ()) -> None:
        self.binaries, self.kubeconfig, self.images = binaries, kubeconfig, list(images)
        self.bridge: Bridge | None = None
        self.paths = NodePaths(Path())
        self.before: node_host.HostState | None = None
        self.store: Path | None = None  # containerd's root kept between runs, when this node holds it
        self.port = self.healthz_port = self.scheduler_port = self.proxy_port = self.dns_ready_port = 0
        # Seconds to each step of the start ("containerd", "images"; "ready": the wait), and each image's import.
        self.phases: dict[str, float] = {}
        self.imported: dict[str, float] = {}

    @property
    def apiserver_flags(self) -> list[str]:
        """kube-apiserver's flags for this node: its advertised address on the bridge (the `kubernetes` Service's
        endpoint), and the kubelet reached by the node's InternalIP (by default the node's name comes first, which
        nothing here resolves)."""
        assert self.bridge is not None, "prepare() first"
        return [f"--advertise-address={self.bridge.address}", "--kubelet-preferred-address-types=InternalIP"]

    @property
    def apiserver_address(self) -> str:
        """Where kube-apiserver listens: the bridge's address, the `kubernetes` Service's endpoint, which its pods
        reach (kube-proxy takes the Service's ClusterIP there)."""
        assert self.bridge is not None, "prepare() first"
        return self.bridge.address

    @property
    def apiserver_cert_ips(self) -> list[str]:
        """The addresses a pod reaches kube-apiserver by: the bridge's, and the Service's (in-cluster config)."""
        return [self.apiserver_address, kubernetes_service_ip()]

    def prepare(self, stack: contextlib.ExitStack) -> None:
        """Read the host, then create the bridge; both undone (and the host checked) when ``stack`` unwinds."""
        lock_service_routing(stack)
        self.before = node_host.snapshot()
        stack.callback(self._restore_host)
        self.store = lock_store(stack)
        self.bridge = create_bridge()

    def start(self, host: Host, deadline: float) -> None:
        assert self.bridge is not None and self.before is not None, "prepare() first"
        from testbed.dockerfiles import image_env

        self.paths = NodePaths(host.root / "node", self.store)
        self.paths.root.mkdir()
        began = time.monotonic()
        env = image_env()
        ensure_pause_image(env)
        ensure_init_image(env)
        host.spawn(
            Spec(
                "containerd",
                ["containerd", "--config", str(write_containerd_config(self.paths))],
                host.log("containerd"),
            )
        )
        host.wait_until(deadline, self._containerd_up, "containerd", watched=["containerd"])
        self.phases["containerd"] = time.monotonic() - began
        self.imported = import_images(
            self.paths.socket, [PAUSE_IMAGE, INIT_IMAGE, *self.images], env, self.paths.root / "images", self.store
        )
        self.phases["images"] = time.monotonic() - began
        write_cni_config(self.paths, self.bridge)
        self.port, self.healthz_port, self.scheduler_port = free_port(), free_port(), free_port()
        config = write_kubelet_config(self.paths, self.bridge, self.port, self.healthz_port)
        kubelet = [
            str(self.binaries / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={self.paths.kubelet}",
            f"--node-ip={self.bridge.address}",
            f"--hostname-override={NODE_NAME}",
            "--v=2",
        ]
        host.spawn(Spec("kubelet", kubelet, host.log("kubelet")))
        scheduler = [
            str(self.binaries / "kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.scheduler_port}",
        ]
        host.spawn(Spec("kube-scheduler", scheduler, host.log("kube-scheduler")))
        self.proxy_port = free_port()
        proxy_config = write_kube_proxy_config(
            self.paths.root / "kube-proxy", self.kubeconfig, NODE_NAME, self.bridge, self.proxy_port, free_port()
        )
        proxy = [str(self.binaries / "kube-proxy"), f"--config={proxy_config}", "--v=2"]
        host.spawn(Spec("kube-proxy", proxy, host.log("kube-proxy")))
        self.dns_ready_port = free_port()
        corefile = write_corefile(self.paths.root / "coredns", self.kubeconfig, self.bridge, self.dns_ready_port)
        host.spawn(Spec("coredns", [str(self.binaries / "coredns"), "-conf", str(corefile)], host.log("coredns")))

    def _containerd_up(self) -> bool:
        if not self.paths.socket.exists():
            return False
        return subprocess.run(ctr(self.paths.socket, "version"), capture_output=True, check=False).returncode == 0

    def wait_ready(self, host: Host, deadline: float) -> None:
        began = time.monotonic()
        watched = list(self.processes)
        kubelet_health = f"http://127.0.0.1:{self.healthz_port}/healthz"
        host.wait_until(deadline, lambda: http_ok(kubelet_health, expect="ok"), "kubelet", watched)
        scheduler_health = f"https://127.0.0.1:{self.scheduler_port}/healthz"
        context = unverified_tls()
        host.wait_until(
            deadline, lambda: http_ok(scheduler_health, expect="ok", context=context), "kube-scheduler", watched
        )
        host.wait_until(deadline, lambda: self._node_ready(host), "kubelet", watched)
        self._untaint()
        host.wait_until(deadline, self._default_service_account, "kube-controller-manager")
        # kube-proxy's health check answers 200 once it has written its rules for the Services it knows.
        proxy_health = f"http://127.0.0.1:{self.proxy_port}/healthz"
        host.wait_until(deadline, lambda: http_ok(proxy_health, expect="lastUpdated"), "kube-proxy", watched)
        dns_ready = f"http://127.0.0.1:{self.dns_ready_port}/ready"
        host.wait_until(deadline, lambda: http_ok(dns_ready, expect="OK"), "coredns", watched)
        self.phases["ready"] = time.monotonic() - began

    def _api(self) -> Any:
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(config_file=str(self.kubeconfig)))

    def _node_ready(self, host: Host) -> bool:
        from kubernetes.client.exceptions import ApiException

        api = self._api()
        with api.api_client:
            try:
                conditions = api.read_node(NODE_NAME).status.conditions or []
            except ApiException:
                return False
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    def _untaint(self) -> None:
        api = self._api()
        with api.api_client:
            node = api.read_node(NODE_NAME)
            taints = [t for t in node.spec.taints or [] if t.key != NOT_READY_TAINT]
            api.patch_node(NODE_NAME, {"spec": {"taints": [t.to_dict() for t in taints] or None}})

    def _default_service_account(self) -> bool:
        """The ServiceAccount admission plugin refuses a pod until its namespace's `default` account exists."""
        from kubernetes.client.exceptions import ApiException

        api = self._api()
        with api.api_client:
            try:
                api.read_namespaced_service_account("default", "default")
            except ApiException:
                return False
        return True

    def stop(self, host: Host) -> None:
        if "kubelet" in host.processes and host.processes["kubelet"].poll() is None:
            self._delete_pods(host)
        for name in ("coredns", "kube-proxy", "kube-scheduler", "kubelet"):
            host.stop(name)
        if "containerd" in host.processes:
            self._kill_containers()
            host.stop("containerd")
        self._kill_shims()
        self._unmount()

    def _delete_pods(self, host: Host) -> None:
        """Delete every pod at once and wait until the kubelet has stopped them all: with a grace period of 1 s (0
        would be a forced deletion, the object gone before the kubelet acts), after which it kills them."""
        from kubernetes.client.exceptions import ApiException

        api = self._api()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        with api.api_client:
            with contextlib.suppress(ApiException):
                for pod in api.list_pod_for_all_namespaces().items:
                    with contextlib.suppress(ApiException):
                        api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1)
            while time.monotonic() < deadline:
                try:
                    if not api.list_pod_for_all_namespaces().items:
                        return
                except ApiException:
                    return
                time.sleep(0.2)

    def _kill_containers(self) -> None:
        """What the kubelet did not stop (it was killed, or a pod outlived the drain): killed and removed."""
        socket = self.paths.socket
        run = subprocess.run
        tasks = run(ctr(socket, "tasks", "list", "--quiet"), capture_output=True, text=True, check=False).stdout.split()
        for task in tasks:
            run(ctr(socket, "tasks", "kill", "--all", "--signal", "SIGKILL", task), capture_output=True, check=False)
        for task in tasks:
            run(ctr(socket, "tasks", "delete", "--force", task), capture_output=True, check=False)
        for container in run(
            ctr(socket, "containers", "list", "--quiet"), capture_output=True, text=True, check=False
        ).stdout.split():
            run(ctr(socket, "containers", "delete", container), capture_output=True, check=False)

    def _kill_shims(self) -> None:
        """containerd's shims outlive it (each runs a pod's containers): any still running for this node is killed."""
        address = str(self.paths.socket)
        shims = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if cmdline and "containerd-shim" in cmdline[0] and address in cmdline:
                shims.append(proc)
        for proc in shims:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(shims, timeout=10)

    def _unmount(self) -> None:
        """Unmount what is left mounted under the node's folder (rootfs, shm, netns, volumes), newest first."""
        if not str(self.paths.root) or self.paths.root == Path():
            return
        folders = (str(self.paths.root), *([str(self.store)] if self.store else []))
        for point in reversed(node_host.mount_points(folders)):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode:
                subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)

    def _restore_host(self) -> None:
        assert self.before is not None
        if self.bridge is not None:
            delete_bridge(self.bridge)
        failed = node_host.restore(self.before)
        left = node_host.differences(self.before, node_host.snapshot())
        folders = (str(self.paths.root), *([str(self.store)] if self.store else []))
        left += [f"mount left: {point}" for point in node_host.mount_points(folders) if self.paths.root != Path()]
        if failed or left:
            raise ControlPlaneError("the node left the host changed: " + "; ".join([*failed, *left]))

    def containerd_images(self) -> set[str]:
        return containerd_images(self.paths.socket)

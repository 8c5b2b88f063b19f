"""The control plane's kube-controller-manager: only the controllers the operators rely on, as the admin."""

from __future__ import annotations

from pathlib import Path

from testbed.controlplane.host import Host, Part, Spec, http_ok, unverified_tls
from testbed.ports import free_port

# The controllers the operators rely on, and no others: job (an MPIJob's launcher and a JobSet's replicas are
# batch Jobs), garbagecollector (what an operator creates is owned by its job, and goes with it), serviceaccount
# (the `default` ServiceAccount of each namespace, which the ServiceAccount admission plugin requires of a pod) and
# namespace (deleting one deletes its objects). No node lifecycle controller: the node agent's Node would otherwise be
# tainted unreachable for a missing kubelet heartbeat (kubernetes@v1.36.3:cmd/kube-controller-manager/names/
# controller_names.go names them).
# persistentvolume-binder-controller: a claim bound to a volume (the node tier's replicas share a hostPath one).
# endpointslice-controller: a Service's EndpointSlices, which kube-proxy routes by and CoreDNS answers a headless
# Service's name from (a PyTorchJob's master is found so).
CONTROLLERS = (
    "job",
    "garbagecollector",
    "serviceaccount",
    "namespace",
    "persistentvolume-binder-controller",
    "endpointslice-controller",
)


# With a real node: the `kube-root-ca.crt` ConfigMap in every namespace, which a pod's ServiceAccount token volume
# mounts (it needs --root-ca-file: kubernetes@v1.36.3:cmd/kube-controller-manager/app/certificates.go:374). Only then:
# the other tests count what a namespace holds.
ROOT_CA_PUBLISHER = "root-ca-certificate-publisher-controller"


class ControllerManager(Part):
    """kube-controller-manager with :data:`CONTROLLERS`, leader election off, serving its health check on a free
    loopback port (with a self-signed certificate it makes in its --cert-dir)."""

    name = "kube-controller-manager"
    processes = ("kube-controller-manager",)

    def __init__(self, binary: Path, kubeconfig: Path, root_ca_file: Path | None = None) -> None:
        self.binary, self.kubeconfig, self.root_ca_file = binary, kubeconfig, root_ca_file
        self.port = 0

    def start(self, host: Host, deadline: float) -> None:
        self.port = free_port()
        command = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join([*CONTROLLERS, *([ROOT_CA_PUBLISHER] if self.root_ca_file else [])])}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={host.root / self.name}",
            *([f"--root-ca-file={self.root_ca_file}"] if self.root_ca_file else []),
            "--profiling=false",
        ]
        host.spawn(Spec(self.name, command, host.log(self.name)))

    def wait_ready(self, host: Host, deadline: float) -> None:
        context = unverified_tls()
        healthz = f"https://127.0.0.1:{self.port}/healthz"
        host.wait_until(deadline, lambda: http_ok(healthz, expect="ok", context=context), self.name)

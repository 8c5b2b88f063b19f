"""The control plane's Kubeflow operators, each a process on loopback playing what its release's deployment gives it.

Per operator (release facts: kubeflow_operators.py): its namespace, ServiceAccount and release roles (it is
refused what its release is refused), its token where the kubelet mounts it; its webhook Secret filled with the
fixture's CA and a serving certificate that cert-controller keeps, and the release's webhook configurations with a
``url`` at 127.0.0.1. Each runs in a mount namespace of its own whose ``/tmp`` and ``/run`` are folders of the
fixture's: the releases hard-code the certificate folder under /tmp (kubeflow/training-operator@v1.9.0:
pkg/cert/cert.go, kubeflow/trainer@v2.3.0:pkg/util/cert/cert.go, kubernetes-sigs/jobset@v0.12.0:pkg/util/cert/cert.go,
certDir), so nothing is written to this machine's /tmp, and two fixtures never share a folder.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from testbed.controlplane import kubeflow_operators as releases
from testbed.controlplane import pki
from testbed.controlplane.apiserver import APIServer, write_kubeconfig
from testbed.controlplane.host import STOP_TIMEOUT_S, Host, Part, Spec, http_ok
from testbed.controlplane.kubeflow_operators import OPERATORS, Launch, Operator, Ports
from testbed.ports import free_port

SERVICE_ACCOUNT_DIR = "secrets/kubernetes.io/serviceaccount"  # under /run: where the kubelet mounts a pod's token
TOKEN_SECONDS = 24 * 3600  # longer than any test run; the operator reads the token once, at its start


class Operators(Part):
    """The operators ``names`` (in start order), from ``bins``, on the API server of ``apiserver``: all started,
    then each waited for until ready (its webhooks, and Trainer's status server, served)."""

    name = "operators"

    def __init__(
        self,
        names: Sequence[str],
        bins: Mapping[str, Path],
        apiserver: APIServer,
        flags: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``flags``: by operator, flags added to its release's command line (an admin's settings)."""
        self.processes = tuple(names)
        self.bins, self.apiserver = bins, apiserver
        self.flags = dict(flags or {})
        # By operator, the URL that answers "ok" once it is ready, and its launch.
        self.ready_urls: dict[str, str] = {}
        self._launches: dict[str, Launch] = {}
        self._pki: pki.WebhookPKI | None = None

    def start(self, host: Host, deadline: float) -> None:
        from kubernetes import client, config

        chosen = [OPERATORS[name] for name in self.processes]
        serving = [op for op in chosen if op.serves_webhooks]
        if serving:
            self._pki = pki.webhook_pki([op.ca_name for op in serving], [op.dns_name for op in serving])
        with config.new_client_from_config(config_file=str(self.apiserver.kubeconfig)) as api_client:
            core = client.CoreV1Api(api_client)
            for op in chosen:
                spec = self._deploy(host, op, core, client.RbacAuthorizationV1Api(api_client), api_client)
                host.spawn(spec)

    def _deploy(self, host: Host, op: Operator, core: Any, rbac: Any, api_client: Any) -> Spec:
        """What the release's deployment gives operator ``op`` (its namespace, ServiceAccount and roles, webhook
        Secret and configurations, certificate folder); how to start it."""
        from kubernetes import client

        folder = host.root / op.name
        tmp, run = folder / "tmp", folder / "run"
        tmp.mkdir(parents=True)
        _create_namespace(core, op.namespace)
        share = self.bins[op.name].parent / "share"
        for role in releases.release_roles(share, op):
            if role["kind"] == "ClusterRole":
                rbac.create_cluster_role(role)
                rbac.create_cluster_role_binding(releases.binding(role, op))
            else:
                rbac.create_namespaced_role(op.namespace, role)
                rbac.create_namespaced_role_binding(op.namespace, releases.binding(role, op))
        token = _service_account_token(core, op.namespace, op.service_account)
        ca_file = self.apiserver.ca_file
        write_kubeconfig(tmp / "kubeconfig", self.apiserver.server, ca_file, token, inline_ca=True)
        write_service_account(run, token, op.namespace, ca_file.read_bytes())
        ports = Ports(
            health=free_port(),
            webhook=free_port() if op.serves_webhooks else 0,
            status=free_port() if op.name == "trainer" else 0,
        )
        if op.serves_webhooks and self._pki is not None:
            core.create_namespaced_secret(
                op.namespace, {"metadata": {"name": op.secret}, "data": self._pki.secret_data()}
            )
            write_cert_dir(tmp, self._pki)
            admission = client.AdmissionregistrationV1Api(api_client)
            for configuration in releases.webhook_configurations(share, op, ports.webhook, self._pki.ca_crt):
                if configuration["kind"] == "MutatingWebhookConfiguration":
                    admission.create_mutating_webhook_configuration(configuration)
                else:
                    admission.create_validating_webhook_configuration(configuration)
        launch = releases.launch(op, self.bins[op.name] / op.name, Path("/tmp"), ports)
        for file_name, content in launch.files.items():
            (tmp / file_name).write_text(content)
        self.ready_urls[op.name] = launch.ready_url
        self._launches[op.name] = launch
        # It sees its own folder at /tmp and nothing of the fixture's; of this process's environment, only where
        # programs are.
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": "/tmp", "KUBECONFIG": "/tmp/kubeconfig"}
        return Spec(
            op.name,
            [*launch.command, *self.flags.get(op.name, ())],
            host.log(op.name),
            env=env,
            before_exec=private_tmp(tmp, run),
            stop_wait_s=STOP_TIMEOUT_S if op.stop_wait_s is None else op.stop_wait_s,
        )

    def wait_ready(self, host: Host, deadline: float) -> None:
        for name, launch in self._launches.items():
            host.wait_until(deadline, partial(http_ok, launch.ready_url, expect="ok"), name)
            if launch.tls_port and self._pki is not None:
                ready = partial(serves_tls, launch.tls_port, OPERATORS[name].dns_name, self._pki.ca_crt)
                host.wait_until(deadline, ready, name)


def _service_account_token(core: Any, namespace: str, name: str) -> str:
    """A token of ServiceAccount ``name`` (made here), as the kubelet requests one for a pod's volume: for the API
    server's own audience (the issuer), valid for :data:`TOKEN_SECONDS`."""
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    return str(core.create_namespaced_service_account_token(name, namespace, request).status.token)


def _create_namespace(core: Any, name: str) -> None:
    from kubernetes.client.rest import ApiException

    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:  # two operators may share one
            raise


def write_cert_dir(tmp: Path, webhook_pki: pki.WebhookPKI) -> Path:
    """Fill ``<tmp>/k8s-webhook-server/serving-certs`` (the operator's /tmp) as the kubelet fills a mounted Secret."""
    folder = tmp / "k8s-webhook-server" / "serving-certs"
    folder.mkdir(parents=True)
    for name, pem in (
        ("ca.crt", webhook_pki.ca_crt),
        ("tls.crt", webhook_pki.tls_crt),
        ("tls.key", webhook_pki.tls_key),
    ):
        (folder / name).write_bytes(pem)
    return folder


def write_service_account(run: Path, token: str, namespace: str, ca_crt: bytes) -> Path:
    """Fill ``<run>/secrets/kubernetes.io/serviceaccount`` (the operator's /run) as the kubelet fills a pod's
    service-account volume: ``token``, ``namespace`` and ``ca.crt`` (kubernetes@v1.36.3:
    plugin/pkg/admission/serviceaccount/admission.go, TokenVolumeSource's three sources). Trainer's status server
    reads the cluster's token issuer there."""
    folder = run / SERVICE_ACCOUNT_DIR
    folder.mkdir(parents=True)
    (folder / "token").write_text(token)
    (folder / "namespace").write_text(namespace)
    (folder / "ca.crt").write_bytes(ca_crt)
    return folder


def private_tmp(tmp: Path, run: Path) -> Callable[[], None]:
    """A preexec function: the child enters a mount namespace of its own where ``tmp`` is seen at ``/tmp`` (the same
    way kftrain's replicas get a private /workspace: kftrain.backends.local.mountns), and ``run`` at ``/run``
    (``/var/run`` is a link to it), hiding this machine's."""
    from kftrain.backends.local import mountns

    def enter() -> None:
        libc = mountns._libc()
        mountns._enter_namespace(libc)
        mountns._mount(libc, None, "/", None, mountns.MS_REC | mountns.MS_PRIVATE)
        # First: the fixture's folders are under this machine's /tmp.
        mountns._mount(libc, str(run), "/run", None, mountns.MS_BIND)
        mountns._mount(libc, str(tmp), "/tmp", None, mountns.MS_BIND)

    return enter


def can_enter_private_tmp() -> str:
    """Why an operator could not get a private /tmp here ('' when it can): a child tries it."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path[:0] = sys.argv[1:2]\n"
            "from kftrain.backends.local import mountns as m\n"
            "l = m._libc(); m._enter_namespace(l); m._mount(l, None, '/', None, m.MS_REC | m.MS_PRIVATE)",
            str(Path(__file__).resolve().parents[2]),
        ],
        capture_output=True,
        text=True,
    )
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["unknown error"])[-1]


def serves_tls(port: int, server_name: str, ca_crt: bytes) -> bool:
    """Whether a TLS server on 127.0.0.1:``port`` completes a handshake as ``server_name``, trusting ``ca_crt``."""
    context = ssl.create_default_context(cadata=ca_crt.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname=server_name),
        ):
            return True
    except OSError:
        return False


def _crd_name(path: Path) -> str:
    """metadata.name of a CRD file, read from its head (the files are megabytes; the name comes first)."""
    with path.open() as f:
        match = re.search(r"^  name: (\S+)$", f.read(16384), re.MULTILINE)
    return match.group(1) if match else path.name


def crds_not_in(crd_files: Sequence[Path], names: Sequence[str], bins: Mapping[str, Path]) -> list[Path]:
    """The CRDs of the operators ``names`` (their releases' files) that none of ``crd_files`` defines: the reference
    CRDs are the same releases' (JobSet's is not among them)."""
    have = {_crd_name(path) for path in crd_files}
    extra = []
    for name in names:
        for crd in OPERATORS[name].crds:
            path = bins[name].parent / "share" / crd
            if _crd_name(path) not in have:
                extra.append(path)
    return extra

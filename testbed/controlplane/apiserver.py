"""The control plane's kube-apiserver: its certificates and the admin's token, its command line, the admin's
kubeconfig, and the CRDs it is given once ready (each waited for until Established)."""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import pki
from testbed.controlplane.host import ControlPlaneError, Host, Part, Spec, http_ok
from testbed.ports import free_port

# The admin's identity: system:masters is allowed everything by the authorizer the API server puts before RBAC
# (kubernetes@v1.36.3:pkg/kubeapiserver/authorizer/reload.go, authorizerfactory.NewPrivilegedGroups).
ADMIN_USER = "kftrain-admin"
ADMIN_GROUP = "system:masters"

# The advertised address is published as the endpoint of the `kubernetes` Service, and endpoint validation refuses
# a loopback one (kubernetes@v1.36.3:pkg/apis/core/validation/validation.go, "may not be in the loopback range").
# This host's own global address: traffic to it never leaves the machine (left unset, kube-apiserver takes the
# default route's interface address, the same one, and fails where there is none). Never an address beyond the
# host: on some machines TEST-NET-1's 192.0.2.1 is the default gateway.
FALLBACK_ADVERTISE_ADDRESS = "192.0.2.1"  # only where the host has no global address, hence no route to anywhere


def advertise_address() -> str:
    """The host's first global IPv4 address (``ip -4 -o addr show scope global``), else the unroutable fallback."""
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=False
    ).stdout
    for line in shown.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    return FALLBACK_ADVERTISE_ADDRESS


SERVICE_CIDR = "10.0.0.0/24"

# The CRDs are megabytes of YAML: libyaml's loader reads them in a tenth of the pure-Python one's time.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class APIServer(Part):
    name = "kube-apiserver"
    processes = ("kube-apiserver",)

    def __init__(
        self,
        binary: Path,
        etcd_url: str,
        flags: Sequence[str] = (),
        address: str = "127.0.0.1",
        cert_ips: Sequence[str] = (),
    ) -> None:
        """``address``: where it listens (a node's bridge address, so that its pods reach it); ``cert_ips``: more
        addresses its certificate names."""
        self.binary, self.etcd_url, self.flags = binary, etcd_url, list(flags)
        self.address, self.cert_ips = address, list(cert_ips)
        # Known once started: where it serves, the CA that signed its certificate, the admin's token and kubeconfig.
        self.server = ""
        self.ca_file = Path()
        self.token = ""
        self.kubeconfig = Path()

    def start(self, host: Host, deadline: float) -> None:
        paths = pki.write_apiserver_pki(host.root / "pki", self.cert_ips)
        self.ca_file, self.token = paths["ca.crt"], secrets.token_hex(16)
        tokens = host.root / "pki" / "tokens.csv"
        # --token-auth-file's format: token,user,uid,"group1,group2"
        # (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/authentication/token/tokenfile/tokenfile.go).
        tokens.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
        tokens.chmod(0o600)
        port = free_port()
        self.server = f"https://{self.address}:{port}"
        command = [
            str(self.binary),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}",
            f"--secure-port={port}",
            f"--advertise-address={advertise_address()}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Given a serving certificate it writes none; the folder is named anyway so that nothing it might
            # write goes to its default, /var/run/kubernetes.
            f"--cert-dir={host.root / 'apiserver'}",
            f"--tls-cert-file={paths['apiserver.crt']}",
            f"--tls-private-key-file={paths['apiserver.key']}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            # Service-account tokens: the issuer and a key are required flags
            # (kubernetes@v1.36.3:pkg/kubeapiserver/options/authentication.go, "is a required flag"). The issuer is
            # this server's own URL, so that a verifier can fetch its OpenID discovery document and keys at
            # <issuer>/.well-known/openid-configuration and the jwks_uri it names (what Trainer's status server
            # does: kubeflow/trainer@v2.3.0:pkg/statusserver/auth.go, Init). The jwks_uri is named: its default is
            # built from the advertised address (pkg/serviceaccount/openidmetadata.go, NewOpenIDMetadataProvider),
            # which is not where this server listens.
            f"--service-account-issuer={self.server}",
            f"--service-account-jwks-uri={self.server}/openid/v1/jwks",
            f"--service-account-key-file={paths['sa.pub']}",
            f"--service-account-signing-key-file={paths['sa.key']}",
            "--profiling=false",
            *self.flags,
        ]
        host.spawn(Spec(self.name, command, host.log(self.name)))
        self.kubeconfig = host.root / "kubeconfig"
        write_kubeconfig(self.kubeconfig, self.server, self.ca_file, self.token)

    def wait_ready(self, host: Host, deadline: float, watched: Sequence[str] | None = None) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        ready = f"{self.server}/readyz"
        host.wait_until(
            deadline, lambda: http_ok(ready, expect="ok", token=self.token, context=context), self.name, watched
        )


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, *, inline_ca: bool = False) -> None:
    """A kubeconfig for the holder of ``token``; with ``inline_ca``, holding the CA itself rather than its path (for
    a process that does not see the fixture's folder)."""
    name = "kftrain-controlplane"
    cluster: dict[str, str] = {"server": server}
    if inline_ca:
        cluster["certificate-authority-data"] = base64.b64encode(ca_file.read_bytes()).decode()
    else:
        cluster["certificate-authority"] = str(ca_file)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": ADMIN_USER, "namespace": "default"}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


@dataclass(frozen=True)
class Resource:
    """Where the API serves a custom resource: what CustomObjectsApi's calls take."""

    group: str
    version: str
    plural: str
    namespaced: bool


def install_crds(api_client: Any, crd_files: Sequence[Path], deadline: float) -> dict[tuple[str, str], Resource]:
    """Create every CRD, then wait for each to be Established: until its names are accepted its resources
    answer 404, and Established is the condition that says they are served
    (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go).
    By (apiVersion, kind), where each served version of each is served."""
    from kubernetes import client

    resources: dict[tuple[str, str], Resource] = {}
    names: list[str] = []
    api = client.ApiextensionsV1Api(api_client)
    for path in crd_files:
        crd = yaml.load(path.read_text(), Loader=_YAML_LOADER)
        # Not deserialised into the client's models: only the server's answer matters here, and the
        # models of a client older than the server may refuse fields they do not know.
        api.create_custom_resource_definition(crd, _preload_content=False)
        names.append(crd["metadata"]["name"])
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                resources[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = Resource(
                    group=spec["group"],
                    version=version["name"],
                    plural=spec["names"]["plural"],
                    namespaced=spec["scope"] == "Namespaced",
                )
    # One at a time, in the order they were created (about the order they become Established): each read
    # is a megabyte the API server serialises, so polling them all at once slows the server down.
    for name in names:
        while True:
            response = api.read_custom_resource_definition(name, _preload_content=False)
            conditions = json.loads(response.data).get("status", {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRD {name} not Established in time: {conditions}")
            time.sleep(0.1)
    return resources

"""The Kubeflow operators as processes beside the control plane: each as its release deploys it, but on loopback.

A release deploys its operator as a pod: a Service in front of its webhook server, a Secret that cert-controller
(github.com/open-policy-agent/cert-controller) fills with a CA and a serving certificate, that Secret mounted at
``/tmp/k8s-webhook-server/serving-certs``, and webhook configurations naming the Service. Here each operator is a
process on this machine, so :func:`start_operators` plays the parts a cluster would:

* the webhook configurations are the release's own files (``share/`` beside the binary, copied by
  operators/build.sh from the module the build used), with the kustomize patches the release applies to them, but
  each webhook's ``clientConfig`` a ``url`` at ``https://127.0.0.1:PORT`` with the fixture's CA as ``caBundle``;
* the Secret exists before the operator starts, filled with that CA and a serving certificate valid for both the
  Service's DNS name (what cert-controller checks, so it keeps them rather than making its own) and 127.0.0.1 (what
  the API server checks, calling the url);
* each operator runs in a mount namespace of its own where ``/tmp`` is a folder of the fixture's: the releases
  hard-code the certificate folder under ``/tmp`` (kubeflow/training-operator@v1.9.0:pkg/cert/cert.go,
  kubeflow/trainer@v2.3.0:pkg/util/cert/cert.go, kubernetes-sigs/jobset@v0.12.0:pkg/util/cert/cert.go, certDir),
  and the fixture writes the certificate files there as the kubelet writes a mounted Secret; nothing is written to
  this machine's ``/tmp``, and two fixtures never share a folder;
* each operator runs as its release's ServiceAccount, bound to the roles its release binds it to (the release's own
  ClusterRole and Role files, from ``share/``), not as the admin: a permission the release lacks fails here as on a
  cluster. Its token is in its kubeconfig and, as the kubelet mounts it, at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` with the namespace and the cluster's CA (Trainer's status server
  reads the cluster's token issuer there): its mount namespace also has a folder of the fixture's at ``/run``;
* leader election is off where the release lets it be, metrics are off (bind address ``0``), and the health and
  webhook ports are free loopback ports;
* Trainer runs with its ``TrainJobStatus`` feature gate on (alpha, off by default: kubeflow/trainer@v2.3.0:
  pkg/features/features.go), as kftrain's local backend models it: every trainer node is told where to post its
  progress, and the status server applies it to ``status.trainerStatus``.

mpi-operator v0.8.2 cannot be configured so: it always runs leader election (a Lease in ``--lock-namespace``) and
serves its health check on port 8080 of every interface (kubeflow/mpi-operator@v0.8.2:
cmd/mpi-operator/app/server.go, healthCheckPort), so one runs on a machine at a time, and only where 8080 is free.
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.controlplane.certs import key_usage

HERE = Path(__file__).resolve().parent
OPERATORS_BUILD_SCRIPT = HERE / "operators" / "build.sh"
# The health check port mpi-operator v0.8.2 binds on every interface, whatever its flags say.
MPI_OPERATOR_HEALTH_PORT = 8080
# cert-controller renews a certificate that expires within 90 days (its defaultLookaheadInterval,
# open-policy-agent/cert-controller@v0.16.0:pkg/rotator/rotator.go): the fixture's must outlive that.
WEBHOOK_CERT_DAYS = 365


@dataclass(frozen=True)
class WebhookFile:
    """A webhook configuration of the release: its manifest, the kustomize patch the release applies to it, and the
    name the operator looks it up by (cert-controller injects the CA into the configuration of that name)."""

    kind: str  # ValidatingWebhookConfiguration or MutatingWebhookConfiguration
    manifest: str  # path under share/
    patch: str  # path under share/: RFC 6902 operations
    name: str


@dataclass(frozen=True)
class RoleFile:
    """A ClusterRole or Role of the release that its ServiceAccount is bound to: the file under share/ and its name
    there (before the release's kustomize namePrefix)."""

    path: str
    name: str


@dataclass(frozen=True)
class Operator:
    """One operator's release facts: where it keeps its webhook Secret, what it serves, what it needs."""

    name: str  # its folder under operators/ and its binary's name
    # The namespace it runs in (the release's default when no service-account namespace is mounted).
    namespace: str
    crds: tuple[str, ...]  # paths under share/
    webhooks: tuple[WebhookFile, ...] = ()
    # cert-controller's Secret, the Service its certificate names, and the CA's name (CreateCACert puts it in the
    # CA's DNS names, and ValidCert checks the CA for it).
    secret: str = ""
    service: str = ""
    ca_name: str = ""
    # Operators that must run first (Trainer creates JobSets).
    needs: tuple[str, ...] = ()
    # The ServiceAccount its release's Deployment runs as (with the release's namePrefix), and the roles the release
    # binds it to.
    service_account: str = ""
    roles: tuple[RoleFile, ...] = ()
    # How long to wait for it to exit after SIGTERM before SIGKILL; None: the control plane's default.
    stop_wait_s: float | None = None

    @property
    def serves_webhooks(self) -> bool:
        return bool(self.webhooks)

    @property
    def dns_name(self) -> str:
        """The name cert-controller checks the serving certificate for: <service>.<namespace>.svc."""
        return f"{self.service}.{self.namespace}.svc"


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator(
            name="training-operator",
            # kubeflow/training-operator@v1.9.0:pkg/cert/cert.go (defaultOperatorNamespace, caName) and
            # cmd/training-operator.v1/main.go (webhook-service-name, webhook-secret-name, webhookConfigurationName)
            namespace="kubeflow",
            crds=("manifests/base/crds/kubeflow.org_tfjobs.yaml", "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"),
            webhooks=(
                WebhookFile(
                    "ValidatingWebhookConfiguration",
                    "manifests/base/webhook/manifests.yaml",
                    "manifests/base/webhook/patch.yaml",
                    "validator.training-operator.kubeflow.org",
                ),
            ),
            secret="training-operator-webhook-cert",
            service="training-operator",
            ca_name="training-operator-ca",
            # manifests/base/rbac/service-account.yaml, cluster-role-binding.yaml
            service_account="training-operator",
            roles=(RoleFile("manifests/base/rbac/role.yaml", "training-operator"),),
        ),
        Operator(
            name="mpi-operator",
            # Its Lease's namespace (kubeflow/mpi-operator@v0.8.2:cmd/mpi-operator/app/options/options.go,
            # lock-namespace); it has no webhook.
            namespace="mpi-operator",
            crds=("manifests/base/kubeflow.org_mpijobs.yaml",),
            # manifests/base/service-account.yaml, cluster-role-binding.yaml (the file's other two ClusterRoles are
            # for users, aggregated into admin and edit)
            service_account="mpi-operator",
            roles=(RoleFile("manifests/base/cluster-role.yaml", "mpi-operator"),),
        ),
        Operator(
            name="jobset",
            # kubernetes-sigs/jobset@v0.12.0:pkg/util/cert/cert.go (defaultNamespace, caName, the configurations'
            # names: the release's namePrefix jobset-) and api/config/v1alpha1/defaults.go (service, secret)
            namespace="jobset-system",
            crds=("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
            webhooks=(
                WebhookFile(
                    "MutatingWebhookConfiguration",
                    "config/components/webhook/manifests.yaml",
                    "config/components/webhook/patches/mutating-patch.yaml",
                    "jobset-mutating-webhook-configuration",
                ),
                WebhookFile(
                    "ValidatingWebhookConfiguration",
                    "config/components/webhook/manifests.yaml",
                    "config/components/webhook/patches/validating-patch.yaml",
                    "jobset-validating-webhook-configuration",
                ),
            ),
            secret="jobset-webhook-server-cert",
            service="jobset-webhook-service",
            ca_name="jobset-ca",
            # config/components/rbac/: service_account.yaml and the roles role_binding.yaml,
            # leader_election_role_binding.yaml and manager_secrets_role_binding.yaml bind it to
            service_account="jobset-controller-manager",
            roles=(
                RoleFile("config/components/rbac/role.yaml", "manager-role"),
                RoleFile("config/components/rbac/leader_election_role.yaml", "leader-election-role"),
                RoleFile("config/components/rbac/manager_secrets_role.yaml", "manager-secrets-role"),
            ),
        ),
        Operator(
            name="trainer",
            # kubeflow/trainer@v2.3.0:pkg/util/cert/cert.go (defaultNamespace, caName),
            # pkg/apis/config/v1alpha1/defaults.go (service, secret), cmd/trainer-controller-manager/main.go (names)
            namespace="kubeflow-system",
            crds=(
                "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
                "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
                "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
            ),
            webhooks=(
                WebhookFile(
                    "MutatingWebhookConfiguration",
                    "manifests/base/webhook/manifests.yaml",
                    "manifests/base/webhook/patch_mutating.yaml",
                    "defaulter.trainer.kubeflow.org",
                ),
                WebhookFile(
                    "ValidatingWebhookConfiguration",
                    "manifests/base/webhook/manifests.yaml",
                    "manifests/base/webhook/patch_validating.yaml",
                    "validator.trainer.kubeflow.org",
                ),
            ),
            secret="kubeflow-trainer-webhook-cert",
            service="kubeflow-trainer-controller-manager",
            ca_name="kubeflow-trainer-ca",
            needs=("jobset",),
            # manifests/base/rbac/service_account.yaml, role_binding.yaml (the public ConfigMap Role is for users)
            service_account="kubeflow-trainer-controller-manager",
            roles=(RoleFile("manifests/base/rbac/role.yaml", "kubeflow-trainer-controller-manager"),),
            # SIGTERM never ends it sooner than the manager's 30 s grace period (controller-runtime's default, which
            # Trainer's config cannot set): its status server's Start waits on a channel nothing closes
            # (pkg/statusserver/server.go, ``<-serverShutdown``). It holds nothing a test reads once it is stopped;
            # waiting cost each module's control plane 20 s of its teardown.
            stop_wait_s=2.0,
        ),
    )
}


def operator_bin_dirs(names: Sequence[str] | None = None) -> dict[str, Path]:
    """Where operators/build.sh builds each operator (it builds nothing with ``--bin-dir``)."""
    out = subprocess.run(
        ["bash", str(OPERATORS_BUILD_SCRIPT), "--bin-dir", *(names or ())],
        capture_output=True,
        text=True,
        check=True,
    )
    return {name: Path(folder) for name, folder in (line.split(" ", 1) for line in out.stdout.splitlines())}


def missing_operators(names: Sequence[str]) -> list[str]:
    """The operators of ``names`` whose binary is not built."""
    folders = operator_bin_dirs(names)
    return [name for name in names if not (folders[name] / name).is_file()]


def in_start_order(names: Sequence[str]) -> list[str]:
    """``names`` with each operator after those it needs (which must be among them)."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name in ordered:
            return
        for need in OPERATORS[name].needs:
            if need not in names:
                raise ValueError(f"operator {name} needs {need}: start both")
            visit(need)
        ordered.append(name)

    for name in names:
        if name not in OPERATORS:
            raise ValueError(f"unknown operator {name!r}: one of {', '.join(OPERATORS)}")
        visit(name)
    return ordered


# --- certificates -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookPKI:
    """The fixture's webhook CA and one serving certificate for every operator (PEM)."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    def secret_data(self) -> dict[str, str]:
        """A cert-controller Secret's data (its caCertName, caKeyName, defaultCertName, defaultKeyName)."""
        files = {"ca.crt": self.ca_crt, "ca.key": self.ca_key, "tls.crt": self.tls_crt, "tls.key": self.tls_key}
        return {name: base64.b64encode(pem).decode() for name, pem in files.items()}


def webhook_pki(operators: Sequence[Operator]) -> WebhookPKI:
    """A CA carrying every operator's CA name, and a serving certificate for every operator's Service and for
    127.0.0.1, both valid for longer than cert-controller's lookahead, so that it keeps them
    (open-policy-agent/cert-controller@v0.16.0:pkg/rotator/rotator.go, refreshCertIfNeeded: validCACert checks the
    CA for its CAName with no key usage, which a CA without an extended key usage passes; validServerCert checks
    the certificate for DNSName and server auth)."""
    now = datetime.datetime.now(datetime.UTC)
    begin, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=WEBHOOK_CERT_DAYS)
    # RSA, in PKCS #1: cert-controller reads the CA's key with x509.ParsePKCS1PrivateKey whenever it reconciles a
    # webhook configuration (buildArtifactsFromSecret), and refuses the configuration otherwise.
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kftrain-controlplane-webhook-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(op.ca_name) for op in operators]), critical=False)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(op.dns_name) for op in operators]
    names += [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kftrain-controlplane-webhooks")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return WebhookPKI(
        ca_crt=ca.public_bytes(pem),
        ca_key=_key_pem(ca_key),
        tls_crt=serving.public_bytes(pem),
        tls_key=_key_pem(key),
    )


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    # SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE KEY"): what Go's tls.X509KeyPair reads, as cert-controller's
    # ValidCert does.
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def write_cert_dir(tmp: Path, pki: WebhookPKI) -> Path:
    """Fill ``<tmp>/k8s-webhook-server/serving-certs`` (the operator's /tmp) as the kubelet fills a mounted Secret."""
    folder = tmp / "k8s-webhook-server" / "serving-certs"
    folder.mkdir(parents=True)
    for name, pem in (("ca.crt", pki.ca_crt), ("tls.crt", pki.tls_crt), ("tls.key", pki.tls_key)):
        (folder / name).write_bytes(pem)
    return folder


# --- webhook configurations ---------------------------------------------------------------------------


def json_patch(doc: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """``doc`` with RFC 6902 ``replace`` and ``add`` operations applied (the ones the releases' webhook patches use)."""
    doc = copy.deepcopy(doc)
    for op in operations:
        kind = op.get("op")
        if kind not in ("replace", "add"):
            raise ValueError(f"unsupported patch operation {kind!r} at {op.get('path')}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last, value = parts[-1], copy.deepcopy(op["value"])
        if isinstance(parent, list):
            if kind == "add":
                parent.insert(len(parent) if last == "-" else int(last), value)
            else:
                parent[int(last)] = value
        elif kind == "replace" and last not in parent:
            raise ValueError(f"replace at {op['path']}: no such member")
        else:
            parent[last] = value
    return doc


def webhook_configurations(share: Path, operator: Operator, port: int, ca_crt: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, patched as it patches them, each webhook called at
    ``https://127.0.0.1:port<path>`` and trusting ``ca_crt``."""
    configurations = []
    for webhook_file in operator.webhooks:
        docs = [d for d in yaml.safe_load_all((share / webhook_file.manifest).read_text()) if d]
        (doc,) = [d for d in docs if d.get("kind") == webhook_file.kind]
        doc = json_patch(doc, yaml.safe_load((share / webhook_file.patch).read_text()) or [])
        doc["metadata"] = {"name": webhook_file.name}
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"].get("path", "")
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_crt).decode(),
            }
        configurations.append(doc)
    return configurations


# --- processes ----------------------------------------------------------------------------------------


@dataclass
class Ports:
    """The loopback ports one operator serves on."""

    health: int
    webhook: int = 0
    status: int = 0  # Trainer's status server (it listens on every interface)


@dataclass
class Launch:
    """How to start one operator and when it is ready."""

    command: list[str]
    ready_url: str
    files: dict[str, str] = field(default_factory=dict)  # name -> content, written to its folder
    # A TLS port it serves once started apart from its readiness (Trainer's status server, which first fetches the
    # token issuer's keys and exits the manager if it cannot): 0, none.
    tls_port: int = 0


def launch(operator: Operator, binary: Path, folder: Path, ports: Ports) -> Launch:
    """The operator's command line, and the files it reads, which it finds in ``folder`` (its /tmp)."""
    health = f"127.0.0.1:{ports.health}"
    if operator.name == "training-operator":
        # kubeflow/training-operator@v1.9.0:cmd/training-operator.v1/main.go's flags; only the kinds the fixture
        # installs: the MPIJob v1 scheme would watch the mpijobs.kubeflow.org that mpi-operator's v2beta1 CRD is.
        return Launch(
            [
                str(binary),
                "--metrics-bind-address=0",
                f"--health-probe-bind-address={health}",
                f"--webhook-server-port={ports.webhook}",
                "--enable-scheme=tfjob",
                "--enable-scheme=pytorchjob",
                "--leader-elect=false",
            ],
            f"http://{health}/readyz",
        )
    if operator.name == "mpi-operator":
        # kubeflow/mpi-operator@v0.8.2:cmd/mpi-operator/app/options/options.go; no metrics (monitoring-port 0).
        return Launch(
            [str(binary), f"--lock-namespace={operator.namespace}", "--monitoring-port=0", "--threadiness=2"],
            f"http://127.0.0.1:{MPI_OPERATOR_HEALTH_PORT}/healthz",
        )
    if operator.name == "jobset":
        # kubernetes-sigs/jobset@v0.12.0:main.go's flags and api/config/v1alpha1/configuration_types.go.
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "webhook": {"port": ports.webhook, "host": "127.0.0.1"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
        }
        return Launch(
            [
                str(binary),
                f"--config={folder / 'config.yaml'}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address={health}",
            ],
            f"http://{health}/readyz",
            {"config.yaml": yaml.safe_dump(config)},
        )
    if operator.name == "trainer":
        # kubeflow/trainer@v2.3.0:pkg/apis/config/v1alpha1/configuration_types.go; the release's own file is
        # manifests/base/manager/controller_manager_config.yaml.
        config = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": health},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": ports.webhook, "host": "127.0.0.1"},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": True},
            "featureGates": {"TrainJobStatus": True},
            "statusServer": {"port": ports.status},
        }
        return Launch(
            [str(binary), f"--config={folder / 'config.yaml'}"],
            f"http://{health}/readyz",
            {"config.yaml": yaml.safe_dump(config)},
            tls_port=ports.status,
        )
    raise ValueError(f"no launch for {operator.name}")


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


SERVICE_ACCOUNT_DIR = "secrets/kubernetes.io/serviceaccount"  # under /run: where the kubelet mounts a pod's token
TOKEN_SECONDS = 24 * 3600  # longer than any test run; the operator reads the token once, at its start


def release_roles(share: Path, operator: Operator) -> list[dict[str, Any]]:
    """The ClusterRoles and Roles the release binds ``operator``'s ServiceAccount to, each named
    ``<operator>:<its name>`` (the releases' names collide: JobSet's is ``manager-role`` before its namePrefix), a Role
    in the operator's namespace (the release's kustomize namespace)."""
    found = []
    for role in operator.roles:
        docs = [d for d in yaml.safe_load_all((share / role.path).read_text()) if d]
        (doc,) = [d for d in docs if d.get("kind") in ("ClusterRole", "Role") and d["metadata"]["name"] == role.name]
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{operator.name}:{role.name}"}
        if doc["kind"] == "Role":
            doc["metadata"]["namespace"] = operator.namespace
        found.append(doc)
    return found


def binding(role: Mapping[str, Any], operator: Operator) -> dict[str, Any]:
    """``role``'s binding to the operator's ServiceAccount (a RoleBinding in the Role's namespace)."""
    kind = "ClusterRoleBinding" if role["kind"] == "ClusterRole" else "RoleBinding"
    subject = {"kind": "ServiceAccount", "name": operator.service_account, "namespace": operator.namespace}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": dict(role["metadata"]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": role["metadata"]["name"]},
        "subjects": [subject],
    }


def write_service_account(run: Path, token: str, namespace: str, ca_crt: bytes) -> Path:
    """Fill ``<run>/secrets/kubernetes.io/serviceaccount`` (the operator's /run) as the kubelet fills a pod's
    service-account volume: ``token``, ``namespace`` and ``ca.crt`` (kubernetes@v1.36.3:
    plugin/pkg/admission/serviceaccount/admission.go, TokenVolumeSource's three sources)."""
    folder = run / SERVICE_ACCOUNT_DIR
    folder.mkdir(parents=True)
    (folder / "token").write_text(token)
    (folder / "namespace").write_text(namespace)
    (folder / "ca.crt").write_bytes(ca_crt)
    return folder


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


def can_enter_private_tmp() -> str:
    """Why an operator could not get a private /tmp here ('' when it can): a child tries it."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path[:0] = sys.argv[1:2]\n"
            "from kftrain.backends.local import mountns as m\n"
            "l = m._libc(); m._enter_namespace(l); m._mount(l, None, '/', None, m.MS_REC | m.MS_PRIVATE)",
            str(HERE.parents[1]),
        ],
        capture_output=True,
        text=True,
    )
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["unknown error"])[-1]

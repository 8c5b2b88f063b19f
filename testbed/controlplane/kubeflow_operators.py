"""The Kubeflow operators' release facts: what each release deploys (its namespace, CRDs, webhook configurations and
the kustomize patches it applies to them, its ServiceAccount and roles), where operators/build.sh builds it, and
its command line here (testbed/controlplane/operators.py runs them).

Leader election is off where the release lets it be, metrics are off (bind address ``0``), and the health and
webhook ports are free loopback ports. Trainer runs with its ``TrainJobStatus`` feature gate on (alpha, off by
default: kubeflow/trainer@v2.3.0:pkg/features/features.go), as kftrain's local backend models it. mpi-operator v0.8.2
always runs leader election and serves its health check on port 8080 of every interface
(kubeflow/mpi-operator@v0.8.2:cmd/mpi-operator/app/server.go, healthCheckPort): one runs on a machine at a time.
"""

from __future__ import annotations

import base64
import copy
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
OPERATORS_BUILD_SCRIPT = HERE / "operators" / "build.sh"
# The health check port mpi-operator v0.8.2 binds on every interface, whatever its flags say.
MPI_OPERATOR_HEALTH_PORT = 8080


@dataclass(frozen=True)
class WebhookFile:
    """A webhook configuration of the release: its manifest, the kustomize patch the release applies to it, and the
    name the operator looks it up by (cert-controller injects the CA into the configuration of that name)."""

    kind: str  # ValidatingWebhookConfiguration or MutatingWebhookConfiguration
    manifest: str  # path under share/
    patch: str  # path under share/: RFC 6902 operations
    name: str


def _mutating_and_validating(
    manifest: str, mutating: tuple[str, str], validating: tuple[str, str]
) -> tuple[WebhookFile, WebhookFile]:
    """A release's two webhook configurations, both in ``manifest``: each as (its patch, its name)."""
    return (
        WebhookFile("MutatingWebhookConfiguration", manifest, *mutating),
        WebhookFile("ValidatingWebhookConfiguration", manifest, *validating),
    )


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
    # The ServiceAccount its release's Deployment runs as (with the release's namePrefix; empty: one named as the
    # operator is), and the roles the release binds it to.
    service_account: str = ""
    roles: tuple[RoleFile, ...] = ()
    # How long to wait for it to exit after SIGTERM before SIGKILL; None: the control plane's default.
    stop_wait_s: float | None = None

    def __post_init__(self) -> None:
        if not self.service_account:
            object.__setattr__(self, "service_account", self.name)

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
            # manifests/base/rbac/service-account.yaml (training-operator), cluster-role-binding.yaml
            roles=(RoleFile("manifests/base/rbac/role.yaml", "training-operator"),),
        ),
        Operator(
            name="mpi-operator",
            # Its Lease's namespace (kubeflow/mpi-operator@v0.8.2:cmd/mpi-operator/app/options/options.go,
            # lock-namespace); it has no webhook.
            namespace="mpi-operator",
            crds=("manifests/base/kubeflow.org_mpijobs.yaml",),
            # manifests/base/service-account.yaml (mpi-operator), cluster-role-binding.yaml (the file's other two
            # ClusterRoles are for users, aggregated into admin and edit)
            roles=(RoleFile("manifests/base/cluster-role.yaml", "mpi-operator"),),
        ),
        Operator(
            name="jobset",
            # kubernetes-sigs/jobset@v0.12.0:pkg/util/cert/cert.go (defaultNamespace, caName, the configurations'
            # names: the release's namePrefix jobset-) and api/config/v1alpha1/defaults.go (service, secret)
            namespace="jobset-system",
            crds=("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
            webhooks=_mutating_and_validating(
                "config/components/webhook/manifests.yaml",
                ("config/components/webhook/patches/mutating-patch.yaml", "jobset-mutating-webhook-configuration"),
                ("config/components/webhook/patches/validating-patch.yaml", "jobset-validating-webhook-configuration"),
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
            webhooks=_mutating_and_validating(
                "manifests/base/webhook/manifests.yaml",
                ("manifests/base/webhook/patch_mutating.yaml", "defaulter.trainer.kubeflow.org"),
                ("manifests/base/webhook/patch_validating.yaml", "validator.trainer.kubeflow.org"),
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

"""A real Kubernetes control plane for the tests: etcd and kube-apiserver, built from Go modules by build.sh.

Where testbed/fake_k8s answers like an API server, this *is* one: the CRDs' OpenAPI schemas, their CEL rules,
defaulting and pruning are Kubernetes' own code. :func:`control_plane` starts etcd and kube-apiserver on free
loopback ports in a temporary folder, installs the operators' CRDs, and on exit stops both and removes the
folder. It never builds: without the binaries :func:`missing_binaries` names them, and :data:`BUILD_HINT`
says how to build them.

By default no controller runs (no kube-controller-manager, no scheduler, no kubelet, no operator, no webhook): an
object is admitted or refused by the API server alone, and nothing acts on it. With ``operators``, the fixture also
starts kube-controller-manager (the controllers the operators rely on) and the named Kubeflow operators, built by
operators/build.sh, with their webhooks (testbed/controlplane/kubeflow_operators.py says how each runs here); pods
are then created, and testbed/controlplane/node_agent.py plays the node that runs them.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import psutil
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed import REPO_ROOT
from testbed.controlplane import kubeflow_operators
from testbed.controlplane.certs import key_usage
from testbed.controlplane.kubeflow_operators import OPERATORS

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
# What a skipped test tells its reader to run, from the repository's root.
BUILD_HINT = f"bash {BUILD_SCRIPT.relative_to(REPO_ROOT)}"
BINARIES = ("etcd", "kube-apiserver")
OPERATORS_BUILD_HINT = f"bash {kubeflow_operators.OPERATORS_BUILD_SCRIPT.relative_to(REPO_ROOT)}"
# The controllers the operators rely on, and no others: job (an MPIJob's launcher and a JobSet's replicas are
# batch Jobs), garbagecollector (what an operator creates is owned by its job, and goes with it), serviceaccount
# (the `default` ServiceAccount of each namespace, which the ServiceAccount admission plugin requires of a pod) and
# namespace (deleting one deletes its objects). No node lifecycle controller: the node agent's Node would otherwise be
# tainted unreachable for a missing kubelet heartbeat (kubernetes@v1.36.3:cmd/kube-controller-manager/names/
# controller_names.go names them).
CONTROLLERS = ("job", "garbagecollector", "serviceaccount", "namespace")

# training-operator v1.9.0 and mpi-operator v0.8.2 both define mpijobs.kubeflow.org (as v1 and v2beta1): one API
# server holds one CustomResourceDefinition of a name, so by default the v2beta1 one (what
# examples/manifests/mpijob.yaml is) is installed and this one is left out.
MPIJOB_V1_CRD = "kubeflow.org_mpijobs.v1.9.0.yaml"

# What the API server's Forbidden message says of a ServiceAccount (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/
# pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage: `User %q cannot %s`), as an operator logs it:
# in klog's text, or in a JSON line, its quotes escaped.
FORBIDDEN_SERVICE_ACCOUNT = re.compile(r'is forbidden: User \\?"system:serviceaccount:')

# The admin's identity: system:masters is allowed everything by the authorizer the API server puts before RBAC
# (kubernetes@v1.36.3:pkg/kubeapiserver/authorizer/reload.go, authorizerfactory.NewPrivilegedGroups).
ADMIN_USER = "kftrain-admin"
ADMIN_GROUP = "system:masters"

# Why an address outside this host: the API server publishes its advertise address as the endpoint of the
# `kubernetes` Service, and endpoint validation refuses a loopback one (kubernetes@v1.36.3:
# pkg/apis/core/validation/validation.go, "may not be in the loopback range"); left unset it is taken from the
# host's default route, which a sandbox may lack. 192.0.2.1 is TEST-NET-1 (RFC 5737): nothing is ever there,
# and nothing here needs the Service (no pod runs).
ADVERTISE_ADDRESS = "192.0.2.1"
SERVICE_CIDR = "10.0.0.0/24"

# The CRDs are megabytes of YAML: libyaml's loader reads them in a tenth of the pure-Python one's time.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# A cold start on a busy 2-core machine: etcd in about a second, kube-apiserver's post-start hooks (RBAC
# bootstrap roles, priority-and-fairness defaults) in tens of seconds at worst.
START_TIMEOUT_S = 120.0
# kube-apiserver drains requests before it exits; past this it is killed.
STOP_TIMEOUT_S = 20.0
# The least time between two starts of one controller by the supervisor (the kubelet's back-off starts at 10 s and
# doubles; the tests need the controller back sooner, and one start is all a lost lease needs).
RESTART_BACKOFF_S = 1.0


class ControlPlaneError(RuntimeError):
    """The control plane did not start (the message carries the failing process's last log lines)."""


def bin_dir() -> Path:
    """The folder build.sh builds the binaries into for this checkout's go.mod and go.sum (it builds nothing
    with ``--bin-dir``, so the key of the folder has one definition: build.sh's)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--bin-dir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def missing_binaries(folder: Path | None = None, *, with_controller_manager: bool = False) -> list[str]:
    """The binaries :func:`control_plane` needs that ``folder`` (default :func:`bin_dir`) lacks."""
    folder = folder or bin_dir()
    wanted = (*BINARIES, "kube-controller-manager") if with_controller_manager else BINARIES
    return [name for name in wanted if not (folder / name).is_file()]


def default_crd_files(crd_dir: Path) -> list[Path]:
    """Every CRD in ``crd_dir`` but the training-operator's MPIJob v1 (see :data:`MPIJOB_V1_CRD`)."""
    return [p for p in sorted(crd_dir.glob("*.yaml")) if p.name != MPIJOB_V1_CRD]


@dataclass(frozen=True)
class Resource:
    """Where the API serves a custom resource: what CustomObjectsApi's calls take."""

    group: str
    version: str
    plural: str
    namespaced: bool


@dataclass
class ControlPlane:
    """A running control plane: how to reach it, and what it serves."""

    server: str
    ca_file: Path
    token: str
    kubeconfig: Path
    # By (apiVersion, kind), for every served version of every installed CRD.
    resources: dict[tuple[str, str], Resource]
    # Seconds from the first process start to the CRDs being Established, and to each step on the way
    # ("etcd", "kube-apiserver", "crds": when each was ready).
    started_in_s: float
    phases: dict[str, float]
    processes: dict[str, subprocess.Popen[bytes]] = field(repr=False)
    # The folder holding every process's log (<name>.log), removed on exit.
    root: Path = field(default=Path(), repr=False)
    etcd_url: str = ""
    # How each process was started, to start it again (:meth:`restart_apiserver`, :class:`_Supervisor`), and the
    # stack that stops it.
    specs: dict[str, _Spec] = field(default_factory=dict, repr=False)
    stack: contextlib.ExitStack | None = field(default=None, repr=False)
    # How many times each controller was started again after it exited, as its Deployment would.
    restarts: dict[str, int] = field(default_factory=dict)
    # The one thread that starts a process again: a child is killed when the thread that started it exits
    # (:func:`_die_with_parent`), and this one outlives every process.
    spawner: concurrent.futures.ThreadPoolExecutor | None = field(default=None, repr=False)
    # By operator, the URL that answers "ok" once it is ready.
    ready_urls: dict[str, str] = field(default_factory=dict, repr=False)
    # By process, how much of its log :meth:`denied_operators` skips: what it logged before kube-apiserver was last
    # ready again after a restart.
    log_read_from: dict[str, int] = field(default_factory=dict, repr=False)

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for the admin, leaving the client's global default alone
        (other tests configure it for the fake API server)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def resource(self, manifest: Mapping[str, Any]) -> Resource:
        """Where ``manifest``'s kind is served; KeyError when no installed CRD serves it."""
        return self.resources[(str(manifest["apiVersion"]), str(manifest["kind"]))]

    def rss_bytes(self) -> dict[str, int]:
        """Each process's resident memory now."""
        return {name: psutil.Process(proc.pid).memory_info().rss for name, proc in self.processes.items()}

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of process ``name``'s log (an assertion's message when an operator did not act)."""
        return _tail(self.root / f"{name}.log", lines)

    def denied_operators(self) -> dict[str, list[str]]:
        """By operator, the lines of its log where the API server refused it for want of a permission (client-go
        and controller-runtime log the API's Forbidden message: '... is forbidden: User "system:serviceaccount:..."
        cannot ...'): a rule its release's roles lack, for what the tests made it do. Not counted: what it was
        refused while a restarted kube-apiserver was not ready yet, when its authorizer may not have read the roles
        (readiness waits for its informers: kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/server/config.go,
        NewInformerSyncHealthz)."""
        denied = {}
        for name in self.processes:
            if name not in kubeflow_operators.OPERATORS:
                continue
            log, lines = self.root / f"{name}.log", []
            with contextlib.suppress(FileNotFoundError), log.open("rb") as f:
                f.seek(self.log_read_from.get(name, 0))
                lines = f.read().decode(errors="replace").splitlines()
            found = [line[:400] for line in lines if FORBIDDEN_SERVICE_ACCOUNT.search(line)]
            if found:
                denied[name] = found
        return denied

    def restart_apiserver(self, while_down: Callable[[], None] | None = None) -> float:
        """Stop kube-apiserver (SIGTERM, as a rolling upgrade of the control plane does), run ``while_down``, start it
        again with the same flags and wait until it is ready; the seconds it was unreachable. Its clients (the
        operators, kube-controller-manager, the code under test) see refused connections meanwhile, and its watch
        cache starts empty."""
        assert self.stack is not None and self.spawner is not None, "restart needs the control plane's own stack"
        name = "kube-apiserver"
        began = time.monotonic()
        _stop(self.processes[name])
        if while_down is not None:
            while_down()
        self.spawner.submit(_spawn, self.stack, self.processes, name, self.specs[name], append=True).result()
        context = ssl.create_default_context(cafile=str(self.ca_file))
        _wait_until(
            time.monotonic() + START_TIMEOUT_S,
            lambda: _http_ok(f"{self.server}/readyz", expect="ok", token=self.token, context=context),
            {name: self.processes[name]},  # a controller that lost its lease meanwhile is the supervisor's
            name,
            self.root,
        )
        for other in self.processes:
            log = self.root / f"{other}.log"
            self.log_read_from[other] = log.stat().st_size if log.exists() else 0
        return time.monotonic() - began

    @contextlib.contextmanager
    def operator_redeployed(self, name: str, flags: Sequence[str], files: Mapping[str, str]) -> Iterator[None]:
        """Operator ``name`` run with ``flags`` added to its command line and ``files`` in its /tmp, as a cluster
        admin deploys it with settings of their own; run as before again on exit. Each time its process is stopped
        and the supervisor starts the new one (as a Deployment's rollout replaces its pod), waited for until
        ready."""
        original = self.specs[name]
        tmp = self.root / name / "tmp"
        for file_name, content in files.items():
            (tmp / file_name).write_text(content)
        self._roll_out(name, replace(original, command=[*original.command, *flags]))
        try:
            yield
        finally:
            self._roll_out(name, original)
            for file_name in files:
                (tmp / file_name).unlink(missing_ok=True)

    def _roll_out(self, name: str, spec: _Spec) -> None:
        """Stop operator ``name``; the supervisor starts ``spec`` in its place; wait until that one is ready."""
        old = self.processes[name]
        self.specs[name] = spec
        _stop(old)
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.processes[name] is old:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} was not started again after it was stopped")
            time.sleep(0.05)
        _wait_until(
            deadline,
            lambda: _http_ok(self.ready_urls[name], expect="ok"),
            {name: self.processes[name]},
            name,
            self.root,
        )

    def etcd_revision(self) -> int:
        """etcd's current revision (the resourceVersion of the newest write), read through its JSON gateway."""
        answer = _etcd_post(self.etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(answer["header"]["revision"])

    def write_etcd(self, key: str, value: str) -> int:
        """Put ``key`` (outside ``/registry``, which kube-apiserver keeps) straight into etcd; the revision it made."""
        body = {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value.encode()).decode()}
        return int(_etcd_post(self.etcd_url, "/v3/kv/put", body)["header"]["revision"])

    def compact_etcd(self, revision: int) -> None:
        """Compact etcd's history up to ``revision``, as kube-apiserver does every 5 minutes
        (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/server/options/etcd.go, --etcd-compaction-interval): a
        watch from an older resourceVersion that the watch cache does not hold is then answered 410 Gone."""
        _etcd_post(self.etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})


@contextlib.contextmanager
def control_plane(
    *,
    binaries: Path | None = None,
    crd_files: Sequence[Path] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    operators: Sequence[str] = (),
    apiserver_flags: Sequence[str] = (),
) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver with ``crd_files`` (default: :func:`default_crd_files` of the reference CRDs, and the
    CRDs of ``operators`` the reference lacks) installed and Established; with ``operators`` (names of
    :data:`~testbed.controlplane.kubeflow_operators.OPERATORS`), kube-controller-manager and those operators too,
    each ready (its webhooks served); ``apiserver_flags`` added to kube-apiserver's. Everything stopped, in reverse
    order, and its folder removed on exit."""
    from testbed import reference

    binaries = binaries or bin_dir()
    missing = missing_binaries(binaries, with_controller_manager=bool(operators))
    if missing:
        raise ControlPlaneError(f"{', '.join(missing)} not in {binaries}: run {BUILD_HINT}")
    operators = kubeflow_operators.in_start_order(operators)
    operator_bins = kubeflow_operators.operator_bin_dirs(operators) if operators else {}
    missing = [name for name in operators if not (operator_bins[name] / name).is_file()]
    if missing:
        raise ControlPlaneError(f"operators {', '.join(missing)} not built: run {OPERATORS_BUILD_HINT}")
    if crd_files is None:
        crd_files = default_crd_files(reference.required(reference.CRD_DIR))
        crd_files = [*crd_files, *_operator_crds_not_in(crd_files, operators, operator_bins)]
    deadline = time.monotonic() + start_timeout_s
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="controlplane-spawner")
        stack.callback(spawner.shutdown)  # first registered, last done: after every process has stopped
        root = Path(tempfile.mkdtemp(prefix="kftrain-controlplane-"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        processes: dict[str, subprocess.Popen[bytes]] = {}

        etcd_url = _start_etcd(stack, processes, binaries / "etcd", root / "etcd")
        _wait_until(deadline, lambda: _http_ok(f"{etcd_url}/health", expect='"health":"true"'), processes, "etcd", root)
        phases = {"etcd": time.monotonic() - began}

        pki = _write_pki(root / "pki")
        token = secrets.token_hex(16)
        tokens = root / "pki" / "tokens.csv"
        # --token-auth-file's format: token,user,uid,"group1,group2"
        # (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/authentication/token/tokenfile/tokenfile.go).
        tokens.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
        tokens.chmod(0o600)
        port = _free_port()
        server = f"https://127.0.0.1:{port}"
        command = _apiserver_command(binaries / "kube-apiserver", root, pki, tokens, etcd_url, port, apiserver_flags)
        apiserver = _Spec("kube-apiserver", command, root / "kube-apiserver.log")
        _spawn(stack, processes, "kube-apiserver", apiserver)
        context = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        _wait_until(
            deadline,
            lambda: _http_ok(f"{server}/readyz", expect="ok", token=token, context=context),
            processes,
            "kube-apiserver",
            root,
        )
        phases["kube-apiserver"] = time.monotonic() - began

        kubeconfig = root / "kubeconfig"
        _write_kubeconfig(kubeconfig, server, pki["ca.crt"], token)
        plane = ControlPlane(
            server=server,
            ca_file=pki["ca.crt"],
            token=token,
            kubeconfig=kubeconfig,
            resources={},
            started_in_s=0.0,
            phases=phases,
            processes=processes,
            root=root,
            etcd_url=etcd_url,
            specs={"kube-apiserver": apiserver},
            stack=stack,
            spawner=spawner,
        )
        plane.resources = _install_crds(plane, crd_files, deadline)
        plane.started_in_s = phases["crds"] = time.monotonic() - began
        if operators:
            _start_controller_manager(stack, plane, binaries / "kube-controller-manager", deadline)
            phases["kube-controller-manager"] = time.monotonic() - began
            _start_operators(stack, plane, operators, operator_bins, deadline)
            plane.started_in_s = phases["operators"] = time.monotonic() - began
            supervisor = _Supervisor(plane, ["kube-controller-manager", *operators])
            supervisor.start()
            stack.callback(supervisor.stop)  # before any controller is stopped: none is started again then
        yield plane


# --- processes --------------------------------------------------------------------------------------


def _start_etcd(
    stack: contextlib.ExitStack, processes: dict[str, subprocess.Popen[bytes]], etcd: Path, data: Path
) -> str:
    client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    command = [
        str(etcd),
        "--name=controlplane",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=controlplane={peer}",
        "--initial-cluster-state=new",
        "--log-level=warn",
        # A throwaway store: no fsync makes each write a memory copy (go.etcd.io/etcd/server/v3@v3.6.8:
        # embed/config.go, UnsafeNoFsync, "Disables fsync, unsafe, will cause data loss").
        "--unsafe-no-fsync=true",
    ]
    _spawn(stack, processes, "etcd", _Spec("etcd", command, data.parent / "etcd.log"))
    return client


def _apiserver_command(
    apiserver: Path,
    root: Path,
    pki: dict[str, Path],
    tokens: Path,
    etcd_url: str,
    port: int,
    extra: Sequence[str],
) -> list[str]:
    return [
        str(apiserver),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--advertise-address={ADVERTISE_ADDRESS}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Given a serving certificate it writes none; the folder is named anyway so that nothing it might
        # write goes to its default, /var/run/kubernetes.
        f"--cert-dir={root / 'apiserver'}",
        f"--tls-cert-file={pki['apiserver.crt']}",
        f"--tls-private-key-file={pki['apiserver.key']}",
        f"--token-auth-file={tokens}",
        "--authorization-mode=RBAC",
        # Service-account tokens: the issuer and a key are required flags
        # (kubernetes@v1.36.3:pkg/kubeapiserver/options/authentication.go, "is a required flag"). The issuer is this
        # server's own URL, so that a verifier can fetch its OpenID discovery document and keys at
        # <issuer>/.well-known/openid-configuration and the jwks_uri it names (what Trainer's status server does:
        # kubeflow/trainer@v2.3.0:pkg/statusserver/auth.go, Init). The jwks_uri is named: its default is built from
        # the external address (pkg/serviceaccount/openidmetadata.go, NewOpenIDMetadataProvider), the advertised one,
        # which is not where this server listens.
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-jwks-uri=https://127.0.0.1:{port}/openid/v1/jwks",
        f"--service-account-key-file={pki['sa.pub']}",
        f"--service-account-signing-key-file={pki['sa.key']}",
        "--profiling=false",
        *extra,
    ]


def _start_controller_manager(
    stack: contextlib.ExitStack, plane: ControlPlane, controller_manager: Path, deadline: float
) -> None:
    """kube-controller-manager with :data:`CONTROLLERS`, as the admin, leader election off, serving its health
    check on a free loopback port (a self-signed certificate it makes in its --cert-dir)."""
    port = _free_port()
    command = [
        str(controller_manager),
        f"--kubeconfig={plane.kubeconfig}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={plane.root / 'kube-controller-manager'}",
        "--profiling=false",
    ]
    spec = _Spec("kube-controller-manager", command, plane.root / "kube-controller-manager.log")
    plane.specs[spec.name] = spec
    _spawn(stack, plane.processes, spec.name, spec)
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    _wait_until(
        deadline,
        lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", expect="ok", context=unverified),
        plane.processes,
        "kube-controller-manager",
        plane.root,
    )


def _start_operators(
    stack: contextlib.ExitStack,
    plane: ControlPlane,
    names: Sequence[str],
    bins: Mapping[str, Path],
    deadline: float,
) -> None:
    """Each operator of ``names`` with what its release's deployment gives it (its namespace, its webhook Secret and
    configurations, its certificate folder), started at once, then waited for until each is ready."""
    from kubernetes import client

    chosen = [OPERATORS[name] for name in names]
    serving = [op for op in chosen if op.serves_webhooks]
    pki = kubeflow_operators.webhook_pki(serving) if serving else None
    # Each operator sees its own folder at /tmp and nothing of the fixture's: what it reads is there. Nothing of
    # this process's environment but where programs are.
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": "/tmp", "KUBECONFIG": "/tmp/kubeconfig"}
    ready: dict[str, kubeflow_operators.Launch] = {}
    with plane.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        admission = client.AdmissionregistrationV1Api(api_client)
        rbac = client.RbacAuthorizationV1Api(api_client)
        for op in chosen:
            folder = plane.root / op.name
            tmp = folder / "tmp"
            tmp.mkdir(parents=True)
            _create_namespace(core, op.namespace)
            share = bins[op.name].parent / "share"
            # As its release deploys it: its ServiceAccount, bound to the release's roles; its token in its
            # kubeconfig and where the kubelet mounts it.
            for role in kubeflow_operators.release_roles(share, op):
                if role["kind"] == "ClusterRole":
                    rbac.create_cluster_role(role)
                    rbac.create_cluster_role_binding(kubeflow_operators.binding(role, op))
                else:
                    rbac.create_namespaced_role(op.namespace, role)
                    rbac.create_namespaced_role_binding(op.namespace, kubeflow_operators.binding(role, op))
            token = _service_account_token(core, op.namespace, op.service_account)
            _write_kubeconfig(tmp / "kubeconfig", plane.server, plane.ca_file, token, inline_ca=True)
            run = folder / "run"
            kubeflow_operators.write_service_account(run, token, op.namespace, plane.ca_file.read_bytes())
            ports = kubeflow_operators.Ports(
                health=_free_port(),
                webhook=_free_port() if op.serves_webhooks else 0,
                status=_free_port() if op.name == "trainer" else 0,
            )
            if op.serves_webhooks and pki is not None:
                secret = {"metadata": {"name": op.secret}, "data": pki.secret_data()}
                core.create_namespaced_secret(op.namespace, secret)
                kubeflow_operators.write_cert_dir(tmp, pki)
                for configuration in kubeflow_operators.webhook_configurations(share, op, ports.webhook, pki.ca_crt):
                    if configuration["kind"] == "MutatingWebhookConfiguration":
                        admission.create_mutating_webhook_configuration(configuration)
                    else:
                        admission.create_validating_webhook_configuration(configuration)
            launch = kubeflow_operators.launch(op, bins[op.name] / op.name, Path("/tmp"), ports)
            for file_name, content in launch.files.items():
                (tmp / file_name).write_text(content)
            spec = _Spec(
                op.name,
                launch.command,
                plane.root / f"{op.name}.log",
                env=env,
                before_exec=kubeflow_operators.private_tmp(tmp, run),
                stop_wait_s=STOP_TIMEOUT_S if op.stop_wait_s is None else op.stop_wait_s,
            )
            plane.specs[op.name] = spec
            plane.ready_urls[op.name] = launch.ready_url
            _spawn(stack, plane.processes, op.name, spec)
            ready[op.name] = launch
    for name, launch in ready.items():
        _wait_until(
            deadline, lambda url=launch.ready_url: _http_ok(url, expect="ok"), plane.processes, name, plane.root
        )
        if launch.tls_port and pki is not None:
            _wait_until(
                deadline,
                lambda port=launch.tls_port, server=OPERATORS[name].dns_name, ca=pki.ca_crt: (
                    kubeflow_operators.serves_tls(port, server, ca)
                ),
                plane.processes,
                name,
                plane.root,
            )


def _service_account_token(core: Any, namespace: str, name: str) -> str:
    """A token of ServiceAccount ``name`` (made here), as the kubelet requests one for a pod's volume: for the API
    server's own audience (the issuer), valid for :data:`kubeflow_operators.TOKEN_SECONDS`."""
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"expirationSeconds": kubeflow_operators.TOKEN_SECONDS}}
    return str(core.create_namespaced_service_account_token(name, namespace, request).status.token)


def _create_namespace(core: Any, name: str) -> None:
    from kubernetes.client.rest import ApiException

    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:  # two operators may share one
            raise


def _crd_name(path: Path) -> str:
    """metadata.name of a CRD file, read from its head (the files are megabytes; the name comes first)."""
    with path.open() as f:
        match = re.search(r"^  name: (\S+)$", f.read(16384), re.MULTILINE)
    return match.group(1) if match else path.name


def _operator_crds_not_in(crd_files: Sequence[Path], names: Sequence[str], bins: Mapping[str, Path]) -> list[Path]:
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


@dataclass(frozen=True)
class _Spec:
    """How a process is started: its name, command, log, environment and what runs in the child first (an
    operator's private /tmp)."""

    name: str
    command: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    before_exec: Any = None
    stop_wait_s: float = STOP_TIMEOUT_S  # after SIGTERM, before SIGKILL


def _spawn(
    stack: contextlib.ExitStack,
    processes: dict[str, subprocess.Popen[bytes]],
    name: str,
    spec: _Spec,
    *,
    append: bool = False,
) -> None:
    """Start ``spec`` as ``processes[name]``, logging to its log (after what it holds, with ``append``), stopped when
    ``stack`` unwinds."""
    out: IO[bytes] = stack.enter_context(spec.log.open("ab" if append else "wb"))

    def preexec() -> None:
        _die_with_parent()
        if spec.before_exec is not None:
            spec.before_exec()

    proc = subprocess.Popen(
        spec.command,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=spec.log.parent,
        env=None if spec.env is None else dict(spec.env),
        preexec_fn=preexec if sys.platform == "linux" else None,
        # A session of its own: a signal to the test run's process group (Ctrl-C, timeout(1)'s SIGTERM) reaches
        # only pytest, which stops the plane in order. Sharing the group, etcd died at once while the tests went
        # on, and kube-apiserver answered 504 to everything (the step's delete, the tests' cleanup) until killed.
        start_new_session=True,
    )
    processes[name] = proc
    # Registered after the log, so it runs before the log is closed; the ExitStack unwinds in reverse, so
    # kube-apiserver stops before etcd, and the folder goes last.
    stack.callback(_stop, proc, spec.stop_wait_s)


class _Supervisor:
    """Starts a controller again when it exits, as the Deployment (restartPolicy Always) that runs it on a cluster
    would: an operator exits on purpose when it cannot renew its leader lease, e.g. while kube-apiserver restarts
    (k8s.io/client-go@v0.36.3:tools/leaderelection/leaderelection.go, OnStoppedLeading; mpi-operator v0.8.2's
    cmd/mpi-operator/app/server.go exits with klog.Fatalf "Leader election stopped"). Each restart is counted in
    :attr:`ControlPlane.restarts`; a controller that keeps exiting is started at most every
    :data:`RESTART_BACKOFF_S`."""

    def __init__(self, plane: ControlPlane, names: Sequence[str]) -> None:
        self._plane = plane
        self._names = list(names)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="controlplane-supervisor", daemon=True)
        # What it started, stopped by it: the plane's stack may be unwinding while it runs.
        self._started = contextlib.ExitStack()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=STOP_TIMEOUT_S)
        self._started.close()

    def _loop(self) -> None:
        plane = self._plane
        last: dict[str, float] = {}
        while not self._stop.wait(0.2):
            for name in self._names:
                if plane.processes[name].poll() is None or time.monotonic() - last.get(name, 0.0) < RESTART_BACKOFF_S:
                    continue
                if self._stop.is_set():
                    return
                last[name] = time.monotonic()
                plane.restarts[name] = plane.restarts.get(name, 0) + 1
                assert plane.spawner is not None
                spec = plane.specs[name]
                plane.spawner.submit(_spawn, self._started, plane.processes, name, spec, append=True).result()


def _etcd_post(etcd_url: str, path: str, body: Mapping[str, Any]) -> Any:
    """A call to etcd's gRPC gateway (JSON over HTTP, on its client URL)."""
    request = urllib.request.Request(
        etcd_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the process that started it dies, so that a test run killed
    outright (a timeout's SIGKILL, a crash) leaves no etcd or kube-apiserver behind. Linux's PR_SET_PDEATHSIG
    fires when the starting *thread* exits: start the control plane from a thread that outlives it."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _stop(proc: subprocess.Popen[bytes], wait_s: float = STOP_TIMEOUT_S) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_until(
    deadline: float,
    ready: Any,
    processes: Mapping[str, subprocess.Popen[bytes]],
    name: str,
    root: Path,
) -> None:
    while True:
        for other, proc in processes.items():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{other} exited with {proc.returncode} while waiting for {name}:\n{_tail(root / f'{other}.log')}"
                )
        if ready():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{name} not ready in time:\n{_tail(root / f'{name}.log')}")
        time.sleep(0.1)


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _free_port() -> int:
    """A port free now. Another process may take it before ours binds it: the start then fails with
    ControlPlaneError, the log lines it carries naming the port, and a new start picks other ports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_ok(url: str, *, expect: str, token: str = "", context: ssl.SSLContext | None = None) -> bool:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status == 200 and expect in response.read().decode()
    except (urllib.error.URLError, OSError):
        return False


def _port_free(port: int) -> bool:
    """Whether a Go program could listen on ``port`` of every interface now (Go sets SO_REUSEADDR, so connections
    in TIME_WAIT from an earlier run do not hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


# --- certificates and keys --------------------------------------------------------------------------


def _write_pki(folder: Path) -> dict[str, Path]:
    """A CA, kube-apiserver's serving certificate signed by it, and the service-account signing key.

    ECDSA P-256 throughout: generated in milliseconds where RSA takes tens, and accepted by every consumer here
    (Go's TLS, Python's ssl, the service-account key loaders, kubernetes@v1.36.3:
    staging/src/k8s.io/client-go/util/keyutil/key.go). The verifying key goes in a file of its own: the public
    key loader (ParsePublicKeysPEM) reads an EC private key only in SEC 1 form, the signing key loader
    (ParsePrivateKeyPEM) reads PKCS #8 too."""
    folder.mkdir(mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    # A day either side: the control plane lives minutes, and a skewed clock must not fail its handshakes.
    not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=1)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kftrain-controlplane-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    # Python's ssl (3.13 and later: VERIFY_X509_STRICT) wants the authority key identifier in a leaf.
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    paths = {name: folder / name for name in ("ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")}
    paths["ca.crt"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["apiserver.crt"].write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    paths["apiserver.key"].write_bytes(_pem(key))
    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths["sa.key"].write_bytes(_pem(sa_key))
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return paths


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, *, inline_ca: bool = False) -> None:
    """A kubeconfig for the admin; with ``inline_ca``, holding the CA itself rather than its path (for a process
    that does not see the fixture's folder)."""
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


# --- CRDs -------------------------------------------------------------------------------------------


def _install_crds(plane: ControlPlane, crd_files: Sequence[Path], deadline: float) -> dict[tuple[str, str], Resource]:
    """Create every CRD, then wait for each to be Established: until its names are accepted its resources
    answer 404, and Established is the condition that says they are served
    (kubernetes@v1.36.3:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go)."""
    from kubernetes import client

    resources: dict[tuple[str, str], Resource] = {}
    names: list[str] = []
    with plane.api_client() as api_client:
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


def for_tests(
    operators: Sequence[str] = (), apiserver_flags: Sequence[str] = (), *, denials_expected: bool = False
) -> Iterator[ControlPlane]:
    """A test module's control plane: the reference CRDs required, a skip in one line saying how to build it when
    the binaries are absent (a test never builds), stopped when the module's tests are done with it. With
    ``operators``, those too (see :func:`control_plane`), or a skip in one line saying why they cannot run here; once
    the module is done, an operator refused a permission fails it (:meth:`ControlPlane.denied_operators`), unless
    ``denials_expected`` (a module that takes a permission away)."""
    import pytest

    from testbed import reference

    reference.required(reference.CRD_DIR)
    missing = missing_binaries(with_controller_manager=bool(operators))
    if missing:
        pytest.skip(f"control plane not built ({', '.join(missing)} missing): run `{BUILD_HINT}`")
    if operators:
        missing = kubeflow_operators.missing_operators(operators)
        if missing:
            pytest.skip(f"operators not built ({', '.join(missing)}): run `{OPERATORS_BUILD_HINT}`")
        refused = kubeflow_operators.can_enter_private_tmp()
        if refused:
            pytest.skip(f"the operators need a private /tmp (a mount namespace), which this machine refuses: {refused}")
        if "mpi-operator" in operators and not _port_free(kubeflow_operators.MPI_OPERATOR_HEALTH_PORT):
            pytest.skip(
                f"port {kubeflow_operators.MPI_OPERATOR_HEALTH_PORT} is in use: mpi-operator v0.8.2 serves its "
                "health check there, whatever its flags say"
            )
    with control_plane(operators=operators, apiserver_flags=apiserver_flags) as plane:
        yield plane
        denied = {} if denials_expected else plane.denied_operators()
        assert not denied, "an operator was refused what its release's roles should allow: " + "; ".join(
            f"{name}: {lines[0]} ({len(lines)} lines)" for name, lines in denied.items()
        )

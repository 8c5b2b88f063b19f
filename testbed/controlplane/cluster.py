"""A real Kubernetes control plane for the tests, started from binaries built from Go modules (build.sh,
operators/build.sh): where testbed/fake_k8s answers like an API server, this *is* one.

:func:`control_plane` runs its parts in order, each behind host.py's shape (start, wait ready, stop): etcd.py,
apiserver.py (then the CRDs, Established), and with ``operators`` controllers.py (kube-controller-manager) and
operators.py (the named Kubeflow operators and their webhooks); on exit each is stopped, in reverse, and the folder
removed. Without operators nothing acts on an object. It never builds: :func:`missing_binaries` names what is
missing and :data:`BUILD_HINT` says how to build it. :func:`for_tests` is a test module's fixture.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from testbed import REPO_ROOT
from testbed.controlplane import etcd, kubeflow_operators
from testbed.controlplane.apiserver import ADMIN_GROUP, ADMIN_USER, APIServer, Resource, install_crds
from testbed.controlplane.controllers import ControllerManager
from testbed.controlplane.etcd import Etcd
from testbed.controlplane.host import (
    START_TIMEOUT_S,
    ControlPlaneError,
    Host,
    Part,
    Spec,
    Supervisor,
    http_ok,
    port_free,
    run_part,
)
from testbed.controlplane.node import BINARIES as NODE_BINARIES
from testbed.controlplane.node import Node
from testbed.controlplane.node_images import INIT_IMAGE
from testbed.controlplane.operators import Operators, can_enter_private_tmp, crds_not_in

__all__ = ["ADMIN_GROUP", "ADMIN_USER", "ControlPlane", "ControlPlaneError", "Resource", "control_plane", "for_tests"]

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
# What a skipped test tells its reader to run, from the repository's root.
BUILD_HINT = f"bash {BUILD_SCRIPT.relative_to(REPO_ROOT)}"
BINARIES = ("etcd", "kube-apiserver")
OPERATORS_BUILD_HINT = f"bash {kubeflow_operators.OPERATORS_BUILD_SCRIPT.relative_to(REPO_ROOT)}"

# training-operator v1.9.0 and mpi-operator v0.8.2 both define mpijobs.kubeflow.org (as v1 and v2beta1): one API
# server holds one CustomResourceDefinition of a name, so by default the v2beta1 one (what
# examples/manifests/mpijob.yaml is) is installed and this one is left out.
MPIJOB_V1_CRD = "kubeflow.org_mpijobs.v1.9.0.yaml"

# What the API server's Forbidden message says of a ServiceAccount (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/
# pkg/endpoints/handlers/responsewriters/errors.go, forbiddenMessage: `User %q cannot %s`), as an operator logs it:
# in klog's text, or in a JSON line, its quotes escaped.
FORBIDDEN_SERVICE_ACCOUNT = re.compile(r'is forbidden: User \\?"system:serviceaccount:')


def bin_dir() -> Path:
    """The folder build.sh builds the binaries into for this checkout's go.mod and go.sum (it builds nothing
    with ``--bin-dir``, so the key of the folder has one definition: build.sh's)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--bin-dir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def missing_binaries(
    folder: Path | None = None, *, with_controller_manager: bool = False, with_node: bool = False
) -> list[str]:
    """The binaries :func:`control_plane` needs that ``folder`` (default :func:`bin_dir`) lacks."""
    folder = folder or bin_dir()
    wanted = (*BINARIES, "kube-controller-manager") if with_controller_manager else BINARIES
    wanted = (*wanted, *NODE_BINARIES) if with_node else wanted
    return [name for name in wanted if not (folder / name).is_file()]


def default_crd_files(crd_dir: Path) -> list[Path]:
    """Every CRD in ``crd_dir`` but the training-operator's MPIJob v1 (see :data:`MPIJOB_V1_CRD`)."""
    return [p for p in sorted(crd_dir.glob("*.yaml")) if p.name != MPIJOB_V1_CRD]


@dataclass
class ControlPlane:
    """A running control plane: how to reach it, and what it serves."""

    server: str
    ca_file: Path
    token: str
    kubeconfig: Path
    # By (apiVersion, kind), for every served version of every installed CRD.
    resources: dict[tuple[str, str], Resource]
    # Seconds from the first process start to the CRDs being Established (to the operators being ready, with
    # operators), and to each step on the way ("etcd", "kube-apiserver", "crds", ...: when each was ready).
    started_in_s: float
    phases: dict[str, float]
    host: Host = field(repr=False)
    etcd_url: str = ""
    # Its parts, by name, to start one again (:meth:`restart_apiserver`, :meth:`operator_redeployed`).
    parts: dict[str, Part] = field(default_factory=dict, repr=False)
    # By process, how much of its log :meth:`denied_operators` skips: what it logged before kube-apiserver was last
    # ready again after a restart.
    log_read_from: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        return self.host.processes

    @property
    def root(self) -> Path:
        """The folder holding every process's files and log (<name>.log), removed on exit."""
        return self.host.root

    @property
    def restarts(self) -> dict[str, int]:
        """How many times each controller was started again after it exited, as its Deployment would."""
        return self.host.restarts

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
        return self.host.tail(name, lines)

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
            lines = []
            with contextlib.suppress(FileNotFoundError), self.host.log(name).open("rb") as f:
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
        apiserver = self.parts["kube-apiserver"]
        assert isinstance(apiserver, APIServer)
        began = time.monotonic()
        self.host.stop(apiserver.name)
        if while_down is not None:
            while_down()
        self.host.respawn(apiserver.name)
        # A controller that lost its lease meanwhile is the supervisor's: only kube-apiserver is watched.
        apiserver.wait_ready(self.host, time.monotonic() + START_TIMEOUT_S, watched=[apiserver.name])
        for other in self.processes:
            log = self.host.log(other)
            self.log_read_from[other] = log.stat().st_size if log.exists() else 0
        return time.monotonic() - began

    @contextlib.contextmanager
    def operator_redeployed(self, name: str, flags: Sequence[str], files: Mapping[str, str]) -> Iterator[None]:
        """Operator ``name`` run with ``flags`` added to its command line and ``files`` in its /tmp, as a cluster
        admin deploys it with settings of their own; run as before again on exit. Each time its process is stopped
        and the supervisor starts the new one (as a Deployment's rollout replaces its pod), waited for until
        ready."""
        original = self.host.specs[name]
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

    def _roll_out(self, name: str, spec: Spec) -> None:
        """Stop operator ``name``; the supervisor starts ``spec`` in its place; wait until that one is ready."""
        old = self.processes[name]
        self.host.specs[name] = spec
        self.host.stop(name)
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.processes[name] is old:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} was not started again after it was stopped")
            time.sleep(0.05)
        operators = self.parts["operators"]
        assert isinstance(operators, Operators)
        ready_url = operators.ready_urls[name]
        self.host.wait_until(deadline, partial(http_ok, ready_url, expect="ok"), name, watched=[name])

    def etcd_revision(self) -> int:
        """etcd's current revision (the resourceVersion of the newest write), read through its JSON gateway."""
        return etcd.revision(self.etcd_url)

    def write_etcd(self, key: str, value: str) -> int:
        """Put ``key`` (outside ``/registry``, which kube-apiserver keeps) straight into etcd; the revision it made."""
        return etcd.put(self.etcd_url, key, value)

    def compact_etcd(self, revision: int) -> None:
        """Compact etcd's history up to ``revision``, as kube-apiserver does every 5 minutes
        (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/server/options/etcd.go, --etcd-compaction-interval): a
        watch from an older resourceVersion that the watch cache does not hold is then answered 410 Gone."""
        etcd.compact(self.etcd_url, revision)


@contextlib.contextmanager
def control_plane(
    *,
    binaries: Path | None = None,
    crd_files: Sequence[Path] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    operators: Sequence[str] = (),
    apiserver_flags: Sequence[str] = (),
    node_images: Sequence[str] | None = None,
) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver with ``crd_files`` (default: :func:`default_crd_files` of the reference CRDs, and the
    CRDs of ``operators`` the reference lacks) installed and Established; with ``operators`` (names of
    :data:`~testbed.controlplane.kubeflow_operators.OPERATORS`), kube-controller-manager and those operators too,
    each ready (its webhooks served); ``apiserver_flags`` added to kube-apiserver's. Everything stopped, in reverse
    order, and its folder removed on exit. With ``node_images`` (a list, maybe empty), a real node too (node.py:
    containerd, kubelet, kube-scheduler, and kube-controller-manager), those images moved into its containerd."""
    from testbed import reference

    binaries = binaries or bin_dir()
    with_node = node_images is not None
    missing = missing_binaries(binaries, with_controller_manager=bool(operators) or with_node, with_node=with_node)
    if missing:
        raise ControlPlaneError(f"{', '.join(missing)} not in {binaries}: run {BUILD_HINT}")
    operators = kubeflow_operators.in_start_order(operators)
    operator_bins = kubeflow_operators.operator_bin_dirs(operators) if operators else {}
    missing = [name for name in operators if not (operator_bins[name] / name).is_file()]
    if missing:
        raise ControlPlaneError(f"operators {', '.join(missing)} not built: run {OPERATORS_BUILD_HINT}")
    if crd_files is None:
        crd_files = default_crd_files(reference.required(reference.CRD_DIR))
        crd_files = [*crd_files, *crds_not_in(crd_files, operators, operator_bins)]
    deadline = time.monotonic() + start_timeout_s
    began = time.monotonic()
    phases: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        host = Host(stack)
        node = Node(binaries, host.root / "kubeconfig", node_images or ()) if with_node else None
        if node is not None:
            node.prepare(stack)
            apiserver_flags = [*apiserver_flags, *node.apiserver_flags]
        store = Etcd(binaries / "etcd")
        run_part(stack, host, store, deadline)
        phases[store.name] = time.monotonic() - began
        apiserver = APIServer(
            binaries / "kube-apiserver",
            store.url,
            apiserver_flags,
            **({"address": node.apiserver_address, "cert_ips": node.apiserver_cert_ips} if node is not None else {}),
        )
        run_part(stack, host, apiserver, deadline)
        phases[apiserver.name] = time.monotonic() - began
        plane = ControlPlane(
            server=apiserver.server,
            ca_file=apiserver.ca_file,
            token=apiserver.token,
            kubeconfig=apiserver.kubeconfig,
            resources={},
            started_in_s=0.0,
            phases=phases,
            host=host,
            etcd_url=store.url,
            parts={store.name: store, apiserver.name: apiserver},
        )
        with plane.api_client() as api_client:
            plane.resources = install_crds(api_client, crd_files, deadline)
        plane.started_in_s = phases["crds"] = time.monotonic() - began
        if operators or node is not None:
            parts: list[Part] = [
                ControllerManager(
                    binaries / "kube-controller-manager",
                    apiserver.kubeconfig,
                    apiserver.ca_file if node is not None else None,
                )
            ]
            # With a node, Workers' init-pytorch runs the node's own image: the operator's default, alpine:3.10, would
            # be pulled (kubeflow/training-operator@v1.9.0:pkg/controller.v1/pytorch/initcontainer.go:37-46).
            flags = {"training-operator": [f"--pytorch-init-container-image={INIT_IMAGE}"]} if node is not None else {}
            parts += [Operators(operators, operator_bins, apiserver, flags)] if operators else []
            if node is not None:
                node.kubeconfig = apiserver.kubeconfig
                parts.append(node)
            for part in parts:
                run_part(stack, host, part, deadline)
                plane.parts[part.name] = part
                plane.started_in_s = phases[part.name] = time.monotonic() - began
            supervisor = Supervisor(host, ["kube-controller-manager", *operators])
            supervisor.start()
            stack.callback(supervisor.stop)  # before any controller is stopped: none is started again then
        yield plane
    # What the parts leave on the host is theirs to remove: their processes, and files under the folder.
    left = [*host.left_running(), *([str(host.root)] if host.root.exists() else [])]
    if left:
        raise ControlPlaneError(f"left on the host once stopped: {', '.join(left)}")


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
        refused = can_enter_private_tmp()
        if refused:
            pytest.skip(f"the operators need a private /tmp (a mount namespace), which this machine refuses: {refused}")
        if "mpi-operator" in operators and not port_free(kubeflow_operators.MPI_OPERATOR_HEALTH_PORT):
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

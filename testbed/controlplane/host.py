"""What every part of the control plane shares: the processes it runs on this machine, and the shape of a part.

A :class:`Part` (etcd, kube-apiserver, kube-controller-manager, the operators; a node later) is started, waited
for until ready and stopped; what it leaves on the host is its processes, kept in :class:`Host` (stopped by its
``stop``), and files under ``Host.root`` (removed with it). :class:`Supervisor` starts an exited controller again,
as its Deployment would.
"""

from __future__ import annotations

import abc
import concurrent.futures
import contextlib
import ctypes
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class Spec:
    """How a process is started: its name, command, log, environment and what runs in the child first (an
    operator's private /tmp)."""

    name: str
    command: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    before_exec: Callable[[], None] | None = None
    stop_wait_s: float = STOP_TIMEOUT_S  # after SIGTERM, before SIGKILL


class Host:
    """The processes of one control plane, by name, and the folder holding their files and logs (<name>.log). The
    folder is removed, and the spawner thread ended, when ``stack`` unwinds; each part stops its own processes."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        # The one thread that starts a process again: a child is killed when the thread that started it exits
        # (:func:`_die_with_parent`), and this one outlives every process.
        self._spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="controlplane-spawner")
        stack.callback(self._spawner.shutdown)  # first registered, last done: after every process has stopped
        self.root = Path(tempfile.mkdtemp(prefix="kftrain-controlplane-"))
        stack.callback(shutil.rmtree, self.root, ignore_errors=True)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.specs: dict[str, Spec] = {}
        # How many times each controller was started again after it exited, as its Deployment would.
        self.restarts: dict[str, int] = {}

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def spawn(self, spec: Spec, *, append: bool = False) -> None:
        """Start ``spec`` as ``processes[spec.name]`` from this thread, logging to its log (after what it holds,
        with ``append``)."""
        self.specs[spec.name] = spec

        def preexec() -> None:
            _die_with_parent()
            if spec.before_exec is not None:
                spec.before_exec()

        # The child keeps its own copy of the log's descriptor: this process needs none once it is started.
        with spec.log.open("ab" if append else "wb") as out:
            self.processes[spec.name] = subprocess.Popen(
                spec.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=spec.log.parent,
                env=None if spec.env is None else dict(spec.env),
                preexec_fn=preexec if sys.platform == "linux" else None,
                # A session of its own: a signal to the test run's process group (Ctrl-C, timeout(1)'s SIGTERM)
                # reaches only pytest, which stops the plane in order. Sharing the group, etcd died at once while
                # the tests went on, and kube-apiserver answered 504 to everything until killed.
                start_new_session=True,
            )

    def respawn(self, name: str) -> None:
        """Start ``specs[name]`` again, from the spawner thread, appending to its log."""
        self._spawner.submit(self.spawn, self.specs[name], append=True).result()

    def stop(self, name: str) -> None:
        """Stop process ``name`` (SIGTERM, SIGKILL past its spec's wait), if it was started."""
        if name in self.processes:
            _stop(self.processes[name], self.specs[name].stop_wait_s)

    def wait_until(
        self, deadline: float, ready: Callable[[], bool], name: str, watched: Iterable[str] | None = None
    ) -> None:
        """Until ``ready()``; ControlPlaneError when a process of ``watched`` (default: every one) exits first, or
        at ``deadline``, with the log of the one at fault."""
        while True:
            for other in self.processes if watched is None else watched:
                proc = self.processes[other]
                if proc.poll() is not None:
                    raise ControlPlaneError(
                        f"{other} exited with {proc.returncode} while waiting for {name}:\n{self.tail(other)}"
                    )
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not ready in time:\n{self.tail(name)}")
            time.sleep(0.1)

    def tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def left_running(self) -> list[str]:
        """The processes still running (none, once every part is stopped)."""
        return [name for name, proc in self.processes.items() if proc.poll() is None]


class Part(abc.ABC):
    """One piece of the control plane. ``start`` starts its processes (through ``host``) and writes its files (under
    ``host.root``); ``wait_ready`` returns once it serves, or raises ControlPlaneError; ``stop`` stops what it
    started, its latest process of each name (a restart replaces one), in reverse order."""

    name: str  # its phase in ControlPlane.phases
    processes: tuple[str, ...] = ()  # what it runs, in start order

    @abc.abstractmethod
    def start(self, host: Host, deadline: float) -> None: ...

    @abc.abstractmethod
    def wait_ready(self, host: Host, deadline: float) -> None: ...

    def stop(self, host: Host) -> None:
        for name in reversed(self.processes):
            host.stop(name)


def run_part(stack: contextlib.ExitStack, host: Host, part: Part, deadline: float) -> None:
    """Start ``part`` and wait until it is ready; it is stopped when ``stack`` unwinds (also when it fails to
    start: its stop is registered first)."""
    stack.callback(part.stop, host)
    part.start(host, deadline)
    part.wait_ready(host, deadline)


class Supervisor:
    """Starts a controller again when it exits, as the Deployment (restartPolicy Always) that runs it on a cluster
    would: an operator exits on purpose when it cannot renew its leader lease, e.g. while kube-apiserver restarts
    (k8s.io/client-go@v0.36.3:tools/leaderelection/leaderelection.go, OnStoppedLeading; mpi-operator v0.8.2's
    cmd/mpi-operator/app/server.go exits with klog.Fatalf "Leader election stopped"). Each restart is counted in
    :attr:`Host.restarts`; one that keeps exiting is started at most every :data:`RESTART_BACKOFF_S`."""

    def __init__(self, host: Host, names: Sequence[str]) -> None:
        self._host = host
        self._names = list(names)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="controlplane-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No process is started again once this returns: the parts stop the ones running."""
        self._stop.set()
        self._thread.join(timeout=STOP_TIMEOUT_S)

    def _loop(self) -> None:
        host = self._host
        last: dict[str, float] = {}
        while not self._stop.wait(0.2):
            for name in self._names:
                if host.processes[name].poll() is None or time.monotonic() - last.get(name, 0.0) < RESTART_BACKOFF_S:
                    continue
                if self._stop.is_set():
                    return
                last[name] = time.monotonic()
                host.restarts[name] = host.restarts.get(name, 0) + 1
                host.respawn(name)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the process that started it dies, so that a test run killed
    outright (a timeout's SIGKILL, a crash) leaves no etcd or kube-apiserver behind. Linux's PR_SET_PDEATHSIG
    fires when the starting *thread* exits: start the control plane from a thread that outlives it."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _stop(proc: subprocess.Popen[bytes], wait_s: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def port_free(port: int) -> bool:
    """Whether a Go program could listen on ``port`` of every interface now (Go sets SO_REUSEADDR, so connections
    in TIME_WAIT from an earlier run do not hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def http_ok(url: str, *, expect: str, token: str = "", context: ssl.SSLContext | None = None) -> bool:
    """Whether ``url`` answers 200 with ``expect`` in its body (a health check)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status == 200 and expect in response.read().decode()
    except (urllib.error.URLError, OSError):
        return False


def unverified_tls() -> ssl.SSLContext:
    """A TLS context that checks no certificate (a health check of a server with a self-signed one)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context

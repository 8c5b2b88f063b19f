"""The operator on one machine: every replica a local process with the operator's environment.

What the local backend reproduces, and how:

* one process per replica (MPI: one launcher process; workers are slots in its hostfile), each in
  its own session so the whole tree of a replica (torchrun's workers, mpirun's ranks) can be
  stopped as one;
* the env contract of :mod:`kftrain.operator_env`, with localhost addresses and free ports;
* ``restartPolicy`` (Never, OnFailure, Always, ExitCode) and ``backoffLimit`` (total restarts
  across the job), ``activeDeadlineSeconds``, and the kind's success rule (Master/Chief/worker 0/
  Launcher); when a replica fails for good the others are stopped and the job fails with that
  replica's exit code and its last log lines;
* each replica's output streamed live with a ``[worker-1]`` prefix.

Images are ignored: a container's ``python`` is this interpreter, and the folder of this
interpreter leads ``PATH`` (so ``torchrun`` or ``mpirun`` installed beside it are found).

Differences from a cluster, on purpose: images are ignored (the program comes from the container's
command or ``--command``); sidecar containers are not run; ``Always`` restarts a replica that
fails but treats an exit 0 as done, since restarting a finished trainer only matters until the
operator ends the job; secrets referenced by ``secretKeyRef`` are read from this process's
environment under the same variable name.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult
from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_spec
from kftrain.job.model import Container, JobKind, RestartPolicy, TrainingJob
from kftrain.job.validate import main_container_name, validate_job
from kftrain.operator_env import (
    LocalTopology,
    ReplicaId,
    effective_restart_policy,
    is_retryable_exit_code,
    job_succeeded,
    process_replicas,
    replica_env,
    replica_files,
    replicas_needing_ports,
)

# Variables of the operators' contracts: never inherited from the launching shell, only set per replica.
_CONTRACT_VARS = re.compile(
    r"^(TF_CONFIG|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|"
    r"PET_.*|TORCHELASTIC_.*|K_MPI_JOB_ROLE|OMPI_COMM_WORLD_.*|OMPI_MCA_orte_default_hostfile|"
    r"OMPI_MCA_orte_set_default_slots|I_MPI_HYDRA_HOST_FILE|HYDRA_HOST_FILE)$"
)
_K8S_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
ALL_REPLICA_TYPES = "*"
_PYTHON_NAMES = {"python", "python3", f"python3.{sys.version_info.minor}"}


def expand_k8s_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command, args and env values; ``$$`` escapes a ``$``."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _K8S_VAR_REF.sub(repl, text)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_command_overrides(values: Sequence[str]) -> dict[str, list[str]]:
    """``--command "python t.py"`` for every replica, ``--command Worker="python w.py"`` for one type."""
    out: dict[str, list[str]] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if sep and re.fullmatch(r"[A-Z][A-Za-z]*", key):
            out[key] = shlex.split(rest)
        else:
            out[ALL_REPLICA_TYPES] = shlex.split(value)
    return out


@dataclass
class LocalOptions:
    workdir: Path | None = None
    commands: dict[str, list[str]] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    grace_period_s: float = 5.0
    poll_interval_s: float = 0.05
    log_tail_lines: int = 30
    restart_backoff_s: float = 0.5
    max_restart_backoff_s: float = 10.0
    out: IO[str] | None = None


@dataclass
class _Replica:
    id: ReplicaId
    argv: list[str]
    env: dict[str, str]
    policy: RestartPolicy
    tail: collections.deque[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    restarts: int = 0
    restart_at: float | None = None
    succeeded: bool = False
    finished: bool = False
    last_exit: int | None = None


@dataclass
class _LocalJob:
    job: TrainingJob
    workdir: Path
    owns_workdir: bool
    replicas: list[_Replica]
    started_at: float
    topology: LocalTopology
    total_restarts: int = 0
    result: JobResult | None = None


class LocalBackend(Backend):
    name = "local"

    def __init__(self, options: LocalOptions | None = None) -> None:
        self.options = options or LocalOptions()
        self._jobs: dict[str, _LocalJob] = {}
        self._out_lock = threading.Lock()
        # wait() polls replicas while scale()/kill_replica() may change them from another thread.
        self._state_lock = threading.RLock()

    @property
    def out(self) -> IO[str]:
        return self.options.out or sys.stdout

    # -- submit ----------------------------------------------------------------------------------

    def submit(self, job: TrainingJob) -> JobHandle:
        validate_job(job)
        if job.name in self._jobs and self._jobs[job.name].result is None:
            return self._handle(job)  # same job already running in this process: attach
        if job.run_policy.suspend:
            raise JobSpecError("spec.runPolicy.suspend", "is true: the operator would not start any replica")
        owns = self.options.workdir is None
        workdir = Path(tempfile.mkdtemp(prefix=f"kftrain-{job.name}-")) if owns else Path(self.options.workdir or ".")
        workdir.mkdir(parents=True, exist_ok=True)
        topology = LocalTopology(
            ports={r: free_port() for r in replicas_needing_ports(job)},
            workdir=workdir,
        )
        try:
            replicas = [self._prepare(job, rid, topology, workdir) for rid in process_replicas(job)]
        except BaseException:
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        for rel, content in replica_files(job, topology).items():
            path = workdir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        state = _LocalJob(
            job=job,
            workdir=workdir,
            owns_workdir=owns,
            replicas=replicas,
            started_at=time.monotonic(),
            topology=topology,
        )
        self._jobs[job.name] = state
        self._say(
            f"starting {job.kind.value} {job.name}: {', '.join(r.id.label for r in replicas)} (workdir {workdir})"
        )
        for replica in replicas:
            self._start(replica)
        return self._handle(job)

    def _handle(self, job: TrainingJob) -> JobHandle:
        return JobHandle(backend=self.name, name=job.name, kind=job.kind.value, api_version=job.api_version)

    def _prepare(self, job: TrainingJob, rid: ReplicaId, topology: LocalTopology, workdir: Path) -> _Replica:
        container = _main_container(job, rid.type)
        path = f"spec.{kind_spec(job.kind, job.api_version).replica_key}.{rid.type}.template.spec.containers"
        env = {k: v for k, v in os.environ.items() if not _CONTRACT_VARS.match(k)}
        env.update(self.options.extra_env)
        # Tools installed beside this Python (torchrun, mpirun from a venv) are the image's tools.
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
        pod_name = f"{job.name}-{rid.label}"
        if job.kind == JobKind.MPIJOB and os.geteuid() == 0:
            # mpirun refuses root without these; MPI images set them the same way.
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        if job.kind == JobKind.MPIJOB and not any(shutil.which(t, path=env.get("PATH")) for t in ("ssh", "rsh")):
            # Every slot is on localhost, so mpirun never starts a remote daemon; but OpenMPI 4 refuses to start
            # at all when its rsh launch agent (ssh or rsh) is missing. Any existing program satisfies that check.
            env.setdefault("OMPI_MCA_plm_rsh_agent", shutil.which("false") or "/bin/false")
        for var in container.env or []:
            if var.value_from is not None:
                env[var.name] = _resolve_value_from(var.name, var.value_from, pod_name, job, f"{path}.env")
            else:
                env[var.name] = expand_k8s_vars(var.value or "", env)
        env.update(replica_env(job, rid, topology))
        if job.spec.elastic_policy is not None and not job.spec.elastic_policy.rdzv_host:
            # On a cluster only worker-0's hostname matches the rendezvous endpoint, so only it hosts
            # the c10d store; here every replica is "localhost", so say explicitly who hosts.
            conf = [c for c in env.get("PET_RDZV_CONF", "").split(",") if c and not c.startswith("is_host=")]
            env["PET_RDZV_CONF"] = ",".join([*conf, f"is_host={'true' if rid == ReplicaId('Worker', 0) else 'false'}"])
        override = self.options.commands.get(rid.type) or self.options.commands.get(ALL_REPLICA_TYPES)
        if override:
            argv = list(override)
        elif container.command:
            argv = [*container.command, *(container.args or [])]
        else:
            raise JobSpecError(
                f"{path}[{container.name}].command",
                f"missing: locally the image's entrypoint is not available; give --command "
                f"(or --command {rid.type}=...) with the program to run",
            )
        argv = [expand_k8s_vars(a, env) for a in argv]
        if argv[0] in _PYTHON_NAMES:
            argv[0] = sys.executable  # the image's python is this environment's python
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise JobSpecError(f"{path}[{container.name}].command", f"program {argv[0]!r} not found on PATH")
        logs = workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return _Replica(
            id=rid,
            argv=argv,
            env=env,
            policy=effective_restart_policy(job, rid.type),
            tail=collections.deque(maxlen=self.options.log_tail_lines),
            log_path=logs / f"{rid.label}.log",
        )

    def _start(self, replica: _Replica) -> None:
        replica.proc = subprocess.Popen(
            replica.argv,
            env=replica.env,
            cwd=self.options.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop the replica's whole tree at once
        )
        replica.restart_at = None
        replica.reader = threading.Thread(target=self._pump, args=(replica, replica.proc), daemon=True)
        replica.reader.start()

    def _pump(self, replica: _Replica, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        prefix = f"[{replica.id.label}] "
        with open(replica.log_path, "a", encoding="utf-8") as log:
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                replica.tail.append(line)
                log.write(line + "\n")
                with self._out_lock:
                    self.out.write(prefix + line + "\n")
                    self.out.flush()
        proc.stdout.close()

    def _say(self, message: str) -> None:
        with self._out_lock:
            self.out.write(f"[kftrain] {message}\n")
            self.out.flush()

    # -- wait ------------------------------------------------------------------------------------

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobResult:
        state = self._jobs[handle.name]
        if state.result is not None:
            return state.result
        deadline_s = state.job.run_policy.active_deadline_seconds
        limits = [t for t in (timeout, deadline_s) if t is not None]
        deadline = state.started_at + min(limits) if limits else None
        while True:
            with self._state_lock:
                result = self._step(state)
            if result is None and deadline is not None and time.monotonic() >= deadline:
                reason = "DeadlineExceeded" if deadline_s is not None and min(limits) == deadline_s else "Timeout"
                result = JobResult(JobPhase.FAILED, reason=reason, message=f"job ran longer than {min(limits):g}s")
            if result is not None:
                self._stop_all(state)
                result.duration_s = time.monotonic() - state.started_at
                state.result = result
                self._finish(state, result)
                return result
            time.sleep(self.options.poll_interval_s)

    def _step(self, state: _LocalJob) -> JobResult | None:
        job = state.job
        now = time.monotonic()
        for replica in state.replicas:
            if replica.finished:
                continue
            if replica.proc is None:
                if replica.restart_at is not None and now >= replica.restart_at:
                    self._start(replica)
                continue
            code = replica.proc.poll()
            if code is None:
                continue
            self._drain(replica)
            replica.proc = None
            replica.last_exit = code
            if code == 0:
                replica.succeeded = replica.finished = True
                self._say(f"{replica.id.label} succeeded")
                if job_succeeded(job, {r.id: r.succeeded for r in state.replicas}):
                    return JobResult(JobPhase.SUCCEEDED, reason="Succeeded", message=f"{job.name} succeeded")
                continue
            exit_code = _shell_exit_code(code)
            retry = replica.policy in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS) or (
                replica.policy == RestartPolicy.EXIT_CODE and is_retryable_exit_code(code)
            )
            limit = job.run_policy.backoff_limit
            if not retry:
                if self._elastic_survives(state, replica):
                    replica.finished = True
                    self._say(
                        f"{replica.id.label} exited with code {exit_code}; the elastic job goes on with "
                        f"{self._running_workers(state)} worker(s)"
                    )
                    continue
                return self._failure(replica, "ReplicaFailed", f"{replica.id.label} exited with code {exit_code}")
            if limit is not None and state.total_restarts >= limit:
                return self._failure(
                    replica,
                    "BackoffLimitExceeded",
                    f"{replica.id.label} exited with code {exit_code} after {state.total_restarts} restart(s); "
                    f"backoffLimit is {limit}",
                )
            delay = min(self.options.restart_backoff_s * 2**replica.restarts, self.options.max_restart_backoff_s)
            replica.restarts += 1
            state.total_restarts += 1
            replica.restart_at = now + delay
            bound = f"/{limit}" if limit is not None else ""
            self._say(
                f"{replica.id.label} exited with code {exit_code}; restartPolicy {replica.policy.value}: "
                f"restart {state.total_restarts}{bound} in {delay:.1f}s"
            )
        if all(r.finished for r in state.replicas):
            return JobResult(
                JobPhase.FAILED,
                reason="SuccessPolicyNotMet",
                message="every replica exited but the job's success rule was not met",
            )
        return None

    @staticmethod
    def _running_workers(state: _LocalJob) -> int:
        return sum(1 for r in state.replicas if r.id.type == "Worker" and not r.finished)

    def _elastic_survives(self, state: _LocalJob, replica: _Replica) -> bool:
        """An elastic PyTorchJob loses a worker for good and goes on while minReplicas remain.

        torch's elastic agents re-form the group without it at the next rendezvous.
        """
        elastic = state.job.spec.elastic_policy
        if elastic is None or replica.id.type != "Worker":
            return False
        minimum = elastic.min_replicas or elastic.max_replicas or 1
        return self._running_workers(state) - 1 >= minimum

    # -- elastic scaling and fault injection -------------------------------------------------------

    def scale(self, handle: JobHandle, replica_type: str, replicas: int) -> None:
        """Change a running job's replica count, as ``kubectl scale`` (or an HPA) does on a cluster.

        New replicas get the next indices and the same contract; removed ones (highest indices
        first) are stopped. Elastic PyTorchJobs admit workers between min and maxReplicas.
        """
        with self._state_lock:
            self._scale(self._jobs[handle.name], replica_type, replicas)

    def _scale(self, state: _LocalJob, replica_type: str, replicas: int) -> None:
        job = state.job
        elastic = job.spec.elastic_policy
        if elastic is not None and replica_type == "Worker":
            low, high = elastic.min_replicas or 1, elastic.max_replicas or replicas
            if not low <= replicas <= high:
                raise JobSpecError("spec.elasticPolicy", f"{replicas} workers is outside [{low}, {high}]")
        current = [r for r in state.replicas if r.id.type == replica_type]
        live = [r for r in current if not r.finished]
        next_index = max((r.id.index for r in current), default=-1) + 1
        for _ in range(replicas - len(live)):
            replica = self._prepare(job, ReplicaId(replica_type, next_index), state.topology, state.workdir)
            next_index += 1
            state.replicas.append(replica)
            self._say(f"scaled {replica_type} up: starting {replica.id.label}")
            self._start(replica)
        for replica in sorted(live, key=lambda r: r.id.index, reverse=True)[: max(0, len(live) - replicas)]:
            self._say(f"scaled {replica_type} down: stopping {replica.id.label}")
            replica.finished = True
            self._stop([replica])
        job.replica_specs[replica_type].replicas = replicas

    def kill_replica(self, handle: JobHandle, label: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one replica's whole process tree, as a node loss or OOM kill would."""
        state = self._jobs[handle.name]
        replica = next((r for r in state.replicas if r.id.label == label), None)
        if replica is None or replica.proc is None:
            raise KeyError(f"{label}: no running replica of that name")
        for proc in _process_tree(replica.proc.pid):
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def _failure(self, replica: _Replica, reason: str, message: str) -> JobResult:
        replica.finished = True
        return JobResult(
            JobPhase.FAILED,
            reason=reason,
            message=message,
            exit_code=_shell_exit_code(replica.last_exit or 1),
            failed_replica=replica.id.label,
            log_tail=list(replica.tail),
        )

    def _drain(self, replica: _Replica) -> None:
        # The reader ends at EOF; a grandchild still holding the pipe must not hang us.
        if replica.reader is not None:
            replica.reader.join(timeout=2.0)

    def _finish(self, state: _LocalJob, result: JobResult) -> None:
        self._say(f"{state.job.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
        if result.succeeded and state.owns_workdir:
            shutil.rmtree(state.workdir, ignore_errors=True)
        elif not result.succeeded:
            self._say(f"replica logs kept in {state.workdir / 'logs'}")

    # -- cancel ----------------------------------------------------------------------------------

    def cancel(self, handle: JobHandle) -> None:
        state = self._jobs.get(handle.name)
        if state is None:
            return
        self._stop_all(state)
        if state.result is None:
            state.result = JobResult(JobPhase.FAILED, reason="Cancelled", message="job cancelled", exit_code=143)
            self._say(f"{state.job.name} cancelled; every replica stopped")

    def _stop_all(self, state: _LocalJob) -> None:
        for replica in state.replicas:
            replica.restart_at = None
        self._stop(state.replicas)

    def _stop(self, replicas: list[_Replica]) -> None:
        """SIGTERM each replica's process group, SIGKILL what is left after the grace period."""
        running = [r for r in replicas if r.proc is not None]
        if not running:
            return
        trees: list[psutil.Process] = []
        for replica in running:
            assert replica.proc is not None
            trees.extend(_process_tree(replica.proc.pid))
            _signal_group(replica.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.options.grace_period_s
        gone, alive = psutil.wait_procs(trees, timeout=max(0.0, deadline - time.monotonic()))
        # psutil may reap a replica before Popen does; keep the exit status it saw.
        codes = {p.pid: p.returncode for p in gone if p.returncode is not None}
        for proc in alive:
            _kill_quietly(proc)
        for replica in running:
            assert replica.proc is not None
            _signal_group(replica.proc.pid, signal.SIGKILL)
            replica.proc.wait()
            replica.last_exit = codes.get(replica.proc.pid, replica.proc.returncode)
            self._drain(replica)
            replica.proc = None


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The replica is its session's leader, so its process group id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _kill_quietly(proc: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        proc.kill()


def _shell_exit_code(code: int) -> int:
    """Python reports death by signal N as -N; shells and Kubernetes report 128+N."""
    return 128 - code if code < 0 else code


def _main_container(job: TrainingJob, rtype: str) -> Container:
    containers = job.replica_specs[rtype].template.spec.containers
    name = main_container_name(job)
    return next((c for c in containers if c.name == name), containers[0])


def _resolve_value_from(name: str, source: Mapping[str, Any], pod_name: str, job: TrainingJob, path: str) -> str:
    field_ref = source.get("fieldRef")
    if isinstance(field_ref, Mapping):
        fields = {
            "metadata.name": pod_name,
            "metadata.namespace": job.metadata.namespace or "default",
            "status.podIP": "127.0.0.1",
            "spec.nodeName": socket.gethostname(),
        }
        key = str(field_ref.get("fieldPath"))
        if key in fields:
            return fields[key]
    if name in os.environ:
        return os.environ[name]
    kind = next(iter(source), "valueFrom")
    raise JobSpecError(
        f"{path}[{name}]",
        f"comes from {kind}, which does not exist on this machine; export {name} to give the value locally",
    )

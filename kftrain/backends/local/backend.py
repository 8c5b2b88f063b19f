"""The operator on one machine: the lifecycle of a job whose replicas are local processes.

* one process per replica that runs a program (:meth:`kftrain.job.kinds.Kind.process_replicas`), each under
  its own supervisor (:mod:`.processes`), so the whole tree of a replica is stopped as one and none of it
  outlives kftrain; a submit that fails part-way stops the replicas it had started;
* ``restartPolicy`` (Never, OnFailure, Always, ExitCode) and ``backoffLimit`` (total restarts across the
  job), ``activeDeadlineSeconds``, and the kind's success rule; when a replica fails for good the others
  are stopped and the job fails with that replica's exit code and its last log lines;
* each replica's output streamed live with a ``[worker-1]`` prefix and kept whole in ``<workdir>/logs``
  (:mod:`.output`);
* ``scale`` and ``kill_replica``, as ``kubectl scale`` and a lost node would; for workers that run no program
  (an MPIJob's) they change the workers the operator's files list and stop the ranks placed on a lost one
  (:mod:`kftrain.backends.local.hosted`).

Differences from a cluster, on purpose: images are ignored (the program comes from the container's
command or the config's ``commands``); sidecar containers are not run; ``Always`` restarts a replica that
fails but treats an exit 0 as done, since restarting a finished trainer only matters until the operator
ends the job; secrets referenced by ``secretKeyRef`` are read from this process's environment under the
same variable name.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
import shutil
import signal
import string
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult, JobStatus
from kftrain.backends.console import Console
from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as job_state
from kftrain.backends.local.config import LocalConfig
from kftrain.backends.local.hosted import ranks_on, write_mounted
from kftrain.backends.local.one_machine import local_host_of, local_worker_host
from kftrain.backends.local.output import pump
from kftrain.backends.local.processes import ReplicaProcess, shell_exit_code, stop_replicas
from kftrain.backends.local.replica import LocalReplica, free_port, prepare_replica
from kftrain.backends.local.status_server import StatusServer
from kftrain.backends.local.workdirs import prune_finished, replica_cwd
from kftrain.backends.local.workspace import probe, wrap
from kftrain.contract import WORKSPACE_ENV
from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.base import is_retryable_exit_code
from kftrain.job.model import RestartPolicy, TrainingJob
from kftrain.job.naming import outputs_of
from kftrain.job.topology import LOCAL_HOST, ReplicaId, Topology, all_replicas
from kftrain.job.validate import validate_job
from kftrain.signals import shielded


@dataclass
class _LocalJob:
    job: TrainingJob
    workdir: Path
    cwd: Path  # where its replicas run (kftrain.backends.local.workdirs)
    scratch: Path  # its replicas' TMPDIR, removed when the job ends (a pod's /tmp goes with the pod)
    owns_workdir: bool
    replicas: list[LocalReplica]
    started_at: float
    topology: Topology
    # Workers that run no program here (an MPIJob's), which the operator's files list while they "run".
    hosted: list[ReplicaId]
    next_hosted: int = 0
    total_restarts: int = 0
    result: JobResult | None = None
    # Replicas that run to completion first (a TrainJob's initializers), and those that start once they have.
    initializers: list[LocalReplica] = field(default_factory=list)
    waiting: list[LocalReplica] = field(default_factory=list)
    status_server: StatusServer | None = None

    def workers_running(self) -> int:
        return sum(1 for r in self.replicas if r.id.type == "Worker" and not r.finished)


class LocalBackend(Backend):
    name = "local"
    config: LocalConfig

    def __init__(self, config: LocalConfig | None = None) -> None:
        self.config = config or LocalConfig()
        self.console = Console(self.config.out, self.config.line_sinks)
        self._jobs: dict[str, _LocalJob] = {}
        # wait() polls replicas while scale()/kill_replica() may change them from another thread.
        self._state_lock = threading.RLock()

    # -- submit ----------------------------------------------------------------------------------

    def submit(self, job: TrainingJob) -> JobHandle:
        validate_job(job)
        if not job.metadata.name and job.metadata.generate_name:
            # As the API server does: the prefix and 5 random characters.
            alphabet = string.ascii_lowercase + string.digits
            job.metadata.name = job.metadata.generate_name + "".join(secrets.choice(alphabet) for _ in range(5))
        if job.name in self._jobs and self._jobs[job.name].result is None:
            return self._handle(job)  # same job already running in this process: attach
        if job.run_policy.suspend and not self.config.admit_suspended:
            raise JobSpecError(
                kind_of(job).spec.suspend_field,
                "is true: the operator would not start any replica until a queue (Kueue) admits the job; "
                "kftrain launch --admit runs it here as if admitted",
            )
        if job.run_policy.suspend:
            self.console.say(f"{kind_of(job).spec.suspend_field} is true: running {job.name} as if admitted (--admit)")
        kind = kind_of(job)
        self.config.check_replicas(job)
        prune_finished(self.config.keep_finished, self.config.keep_finished_s)
        owns = self.config.workdir is None
        workdir = Path(tempfile.mkdtemp(prefix=f"kftrain-{job.name}-")) if owns else Path(self.config.workdir or ".")
        workdir.mkdir(parents=True, exist_ok=True)
        topology = Topology(
            ports={r: free_port() for r in kind.listening_replicas(job)},
            files_root=workdir,
            host_of=local_host_of(LOCAL_HOST),
        )
        server: StatusServer | None = None
        # Short, outside the work folder: MPI's session sockets live under TMPDIR, and a socket's path is short.
        scratch = Path(tempfile.mkdtemp(prefix="kftrain-tmp-"))
        try:
            if kind.reports_status(job):
                namespace = job.metadata.namespace or "default"
                server = StatusServer(namespace, job.name, workdir / "trainer-status", self._report_progress)
                topology.status = server.start()
            cwd = replica_cwd(workdir, self.config.cwd or Path.cwd())
            initializers = [
                self._prepare(job, rid, topology, workdir, scratch) for rid in kind.initializer_replicas(job)
            ]
            replicas = [self._prepare(job, rid, topology, workdir, scratch) for rid in kind.process_replicas(job)]
            self._give_workspace(job, workdir, [*initializers, *replicas])
        except BaseException:
            if server is not None:
                server.stop()
            shutil.rmtree(scratch, ignore_errors=True)
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        write_mounted(topology, kind.operator_files(job, topology))
        processes = {r.id for r in replicas}
        state = _LocalJob(
            job=job,
            workdir=workdir,
            cwd=cwd,
            scratch=scratch,
            owns_workdir=owns,
            replicas=[*initializers, *replicas],
            started_at=time.monotonic(),
            topology=topology,
            hosted=[r for r in all_replicas(job) if r.type == "Worker" and r not in processes],
            next_hosted=job.replicas_of("Worker"),
            initializers=initializers,
            waiting=replicas if initializers else [],
            status_server=server,
        )
        self._jobs[job.name] = state
        first = initializers or replicas
        then = f"; then {', '.join(r.id.label for r in replicas)}" if initializers else ""
        self.console.say(
            f"starting {job.kind} {job.name}: {', '.join(r.id.label for r in first)}{then} (workdir {workdir})"
        )
        self._record(state)
        try:
            for replica in first:
                self._start(replica, cwd)
        except BaseException:
            # A replica that could not start fails the submit; those already started must not outlive it.
            with shielded():
                self._stop(state.replicas)
                self._stop_server(state)
                del self._jobs[job.name]
                shutil.rmtree(scratch, ignore_errors=True)
                if owns:
                    shutil.rmtree(workdir, ignore_errors=True)
            raise
        return self._handle(job)

    def _give_workspace(self, job: TrainingJob, workdir: Path, replicas: list[LocalReplica]) -> None:
        """The folder the job's pods share (a TrainJob's /workspace) as the job's own ``<workdir>/workspace``: at its
        path, in a private mount namespace per replica, where this machine allows one; else by KFTRAIN_WORKSPACE."""
        mount = kind_of(job).workspace(job)
        if mount is None:
            return
        folder = workdir / "workspace"
        folder.mkdir(exist_ok=True)
        why = probe() if self.config.private_workspace else "LocalConfig.private_workspace is False"
        for replica in replicas:
            if why is None:
                replica.argv = wrap(folder, replica.argv)
            else:
                replica.env[WORKSPACE_ENV] = str(folder)
        if why is not None:
            self.console.say(
                f"no private {mount} for the replicas here ({why}): the job's {mount} is {folder}; a program that "
                f"reads {mount}/dataset as Trainer documents must read ${WORKSPACE_ENV}/dataset here"
            )

    def _report_progress(self, status: Mapping[str, Any]) -> None:
        """A progress report a node posted to the job's status server: to every progress sink."""
        for sink in self.config.progress_sinks:
            with contextlib.suppress(Exception):  # what watches the job must never end it
                sink(status)

    def _stop_server(self, state: _LocalJob) -> None:
        if state.status_server is not None:
            state.status_server.stop()
            state.status_server = None

    def _handle(self, job: TrainingJob) -> JobHandle:
        return JobHandle(backend=self.name, name=job.name, kind=job.kind, api_version=job.api_version)

    def _prepare(
        self, job: TrainingJob, rid: ReplicaId, topology: Topology, workdir: Path, scratch: Path
    ) -> LocalReplica:
        logs = workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return prepare_replica(job, rid, topology, self.config, logs, scratch)

    def _start(self, replica: LocalReplica, cwd: Path) -> None:
        replica.proc = ReplicaProcess(replica.argv, replica.env, cwd, replica.grace_s)
        replica.restart_at = None

        def on_line(line: str) -> None:
            replica.tail.append(line)
            self.console.replica_line(replica.id.label, line)

        replica.reader = threading.Thread(
            target=pump, args=(replica.proc.stdout, replica.log_path, on_line), daemon=True
        )
        replica.reader.start()

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
                self._blame_crash_loop(state, result)
            if result is not None:
                self._stop_all(state)
                self._stop_server(state)
                result.duration_s = time.monotonic() - state.started_at
                state.result = result
                self._finish(state, result)
                return result
            time.sleep(self.config.poll_interval_s)

    def _step(self, state: _LocalJob) -> JobResult | None:
        """Reap replicas that exited, restart or fail them per their policy; the job's result once it has one."""
        job, kind = state.job, kind_of(state.job)
        now = time.monotonic()
        for replica in state.replicas:
            if replica.finished:
                continue
            if replica.proc is None:
                if replica.restart_at is not None and now >= replica.restart_at:
                    self._start(replica, state.cwd)
                continue
            code = replica.proc.poll()
            if code is None:
                continue
            self._drain(replica)
            replica.proc = None
            replica.last_exit = code
            if code == 0:
                replica.succeeded = replica.finished = True
                self.console.say(f"{replica.id.label} succeeded")
                if kind.succeeded(job, {r.id for r in state.replicas if r.succeeded}):
                    return JobResult(JobPhase.SUCCEEDED, reason="Succeeded", message=f"{job.name} succeeded")
                continue
            exit_code = shell_exit_code(code)
            retry = replica.policy in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS) or (
                replica.policy == RestartPolicy.EXIT_CODE and is_retryable_exit_code(code)
            )
            limit = job.run_policy.backoff_limit
            if not retry:
                if kind.survives_loss(job, replica.id, state.workers_running() - 1):
                    replica.finished = True
                    self.console.say(
                        f"{replica.id.label} exited with code {exit_code}; the elastic job goes on with "
                        f"{state.workers_running()} worker(s)"
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
            delay = min(self.config.restart_backoff_s * 2**replica.restarts, self.config.max_restart_backoff_s)
            replica.restarts += 1
            state.total_restarts += 1
            replica.restart_at = now + delay
            bound = f"/{limit}" if limit is not None else ""
            self.console.say(
                f"{replica.id.label} exited with code {exit_code}; restartPolicy {replica.policy.value}: "
                f"restart {state.total_restarts}{bound} in {delay:.1f}s"
            )
        if state.waiting and all(r.succeeded for r in state.initializers):
            self.console.say(f"{', '.join(r.id.label for r in state.initializers)} completed: starting the job's nodes")
            started, state.waiting = state.waiting, []
            for replica in started:
                self._start(replica, state.cwd)
        if all(r.finished for r in state.replicas):
            return JobResult(
                JobPhase.FAILED,
                reason="SuccessPolicyNotMet",
                message="every replica exited but the job's success rule was not met",
            )
        return None

    # -- elastic scaling and fault injection -------------------------------------------------------

    def scale(self, handle: JobHandle, replica_type: str, replicas: int) -> None:
        """Change a running job's replica count, as ``kubectl scale`` (or an HPA) does on a cluster.

        New replicas get the next indices and the same contract; removed ones (highest indices first)
        are stopped. Elastic PyTorchJobs admit workers between min and maxReplicas.
        """
        with self._state_lock:
            self._scale(self._jobs[handle.name], replica_type, replicas)

    def _scale(self, state: _LocalJob, replica_type: str, replicas: int) -> None:
        job = state.job
        bounds = kind_of(job).worker_bounds(job)
        if bounds is not None and replica_type == "Worker":
            low, high = bounds[0], bounds[1] or replicas
            if not low <= replicas <= high:
                raise JobSpecError("spec.elasticPolicy", f"{replicas} workers is outside [{low}, {high}]")
        if replica_type == "Worker" and not kind_of(job).spec.workers_run_program:
            self._scale_hosted(state, replicas)
            return
        current = [r for r in state.replicas if r.id.type == replica_type]
        live = [r for r in current if not r.finished]
        resized = copy.deepcopy(job)
        resized.replica_specs[replica_type].replicas = replicas
        self.config.check_replicas(resized)
        next_index = max((r.id.index for r in current), default=-1) + 1
        for _ in range(replicas - len(live)):
            replica = self._prepare(
                job, ReplicaId(replica_type, next_index), state.topology, state.workdir, state.scratch
            )
            next_index += 1
            state.replicas.append(replica)
            self.console.say(f"scaled {replica_type} up: starting {replica.id.label}")
            self._start(replica, state.cwd)
        for replica in sorted(live, key=lambda r: r.id.index, reverse=True)[: max(0, len(live) - replicas)]:
            self.console.say(f"scaled {replica_type} down: stopping {replica.id.label}")
            replica.finished = True
            self._stop([replica])
        job.replica_specs[replica_type].replicas = replicas
        job_state.write(job.name, replicas=_labels(state))  # `kftrain jobs logs` reads the new ones too

    def _scale_hosted(self, state: _LocalJob, workers: int) -> None:
        """Workers without a program of their own: new ones get indices never used before in this job (a lost
        worker's host may be blacklisted by horovodrun), the highest go first."""
        while len(state.hosted) < workers:
            added = ReplicaId("Worker", state.next_hosted)
            state.next_hosted += 1
            state.hosted.append(added)
            self.console.say(f"scaled Worker up: {added.label} hosts ranks")
        while len(state.hosted) > workers:
            gone = state.hosted.pop()
            self.console.say(f"scaled Worker down: {gone.label} removed")
        state.job.replica_specs["Worker"].replicas = workers
        self._update_membership(state)

    def _update_membership(self, state: _LocalJob) -> None:
        write_mounted(state.topology, kind_of(state.job).membership_files(state.job, state.topology, state.hosted))

    def kill_replica(self, handle: JobHandle, label: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one replica's whole process tree, as a node loss or OOM kill would.

        A worker that runs no program (an MPIJob's) is lost: it leaves the operator's files and ``sig`` goes to
        the ranks the launcher placed on it.
        """
        state = self._jobs[handle.name]
        with self._state_lock:
            hosted = next((w for w in state.hosted if w.label == label), None)
            if hosted is not None:
                state.hosted.remove(hosted)
                self._update_membership(state)
                host = local_worker_host(hosted.index)
                ranks = [p for r in state.replicas if r.proc is not None for p in ranks_on(r.proc.pid, host)]
                for proc in ranks:
                    with contextlib.suppress(psutil.Error):
                        proc.send_signal(sig)
                self.console.say(f"lost {label} (host {host}): signalled {len(ranks)} rank process(es) on it")
                return
        replica = next((r for r in state.replicas if r.id.label == label), None)
        if replica is None or replica.proc is None:
            raise KeyError(f"{label}: no running replica of that name")
        for proc in replica.proc.program_tree():  # not its supervisor: it sees the program die, and cleans up
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def _failure(self, replica: LocalReplica, reason: str, message: str) -> JobResult:
        replica.finished = True
        return JobResult(
            JobPhase.FAILED,
            reason=reason,
            message=message,
            exit_code=shell_exit_code(replica.last_exit or 1),
            failed_replica=replica.id.label,
            log_tail=list(replica.tail),
        )

    def _blame_crash_loop(self, state: _LocalJob, result: JobResult) -> None:
        """A job stopped by its deadline or timeout while a replica kept failing: name that replica, its exit
        code and its last lines, which would otherwise hide behind "ran longer than"."""
        failing = [r for r in state.replicas if r.restarts and r.last_exit not in (None, 0)]
        if not failing:
            return
        worst = max(failing, key=lambda r: r.restarts)
        code = shell_exit_code(worst.last_exit or 1)
        result.message += (
            f"; {worst.id.label} was crash-looping: it last exited with code {code} after {worst.restarts} restart(s)"
        )
        result.exit_code, result.failed_replica, result.log_tail = code, worst.id.label, list(worst.tail)

    def _drain(self, replica: LocalReplica) -> None:
        # The reader ends at EOF; a grandchild still holding the pipe must not hang us.
        if replica.reader is not None:
            replica.reader.join(timeout=2.0)

    def _record(self, state: _LocalJob) -> None:
        """The job's entry in the state folder (``kftrain jobs``): running, with where its logs are."""
        model_uri, logs_uri = outputs_of(state.job.metadata.annotations)
        job_state.write(
            state.job.name,
            kind=state.job.kind,
            api_version=state.job.api_version,
            labels=dict(state.job.metadata.labels or {}),
            **job_state.launcher_identity(),
            phase=job_state.RUNNING,
            workdir=str(state.workdir),
            workdir_owned=state.owns_workdir,
            replicas=_labels(state),
            model_uri=model_uri,
            logs_uri=logs_uri,
        )

    def _finish(self, state: _LocalJob, result: JobResult) -> None:
        self.console.say(f"{state.job.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
        job_state.write(
            state.job.name,
            phase=result.phase.value,
            reason=result.reason,
            message=result.message,
            exit_code=result.exit_code,
            workdir_kept=not (result.succeeded and state.owns_workdir),
        )
        job_state.keep_logs(state.job.name, state.workdir / "logs", _labels(state))
        shutil.rmtree(state.scratch, ignore_errors=True)
        if result.succeeded and state.owns_workdir:
            shutil.rmtree(state.workdir, ignore_errors=True)
        elif not result.succeeded:
            self.console.say(f"replica logs kept in {state.workdir / 'logs'}")

    # -- the jobs recorded on this machine (any launcher's) ------------------------------------------

    def list_jobs(self) -> list[JobStatus]:
        return local_jobs.list_jobs()

    def get_job(self, name: str) -> JobStatus:
        return local_jobs.get_job(name)

    def job_logs(
        self, name: str, replica: str | None = None, tail: int | None = None, follow: bool = False
    ) -> Iterator[tuple[str, str]]:
        return local_jobs.job_logs(name, replica, tail, follow)

    def delete_job(self, name: str) -> None:
        local_jobs.delete_job(name)

    # -- cancel ----------------------------------------------------------------------------------

    def cancel(self, handle: JobHandle) -> None:
        state = self._jobs.get(handle.name)
        if state is None:
            return
        self._stop_all(state)
        self._stop_server(state)
        if state.result is None:
            state.result = JobResult(JobPhase.FAILED, reason="Cancelled", message="job cancelled", exit_code=143)
            job_state.write(state.job.name, phase=JobPhase.FAILED.value, reason="Cancelled", exit_code=143)
            job_state.keep_logs(state.job.name, state.workdir / "logs", _labels(state))
            self.console.say(f"{state.job.name} cancelled; every replica stopped")
        shutil.rmtree(state.scratch, ignore_errors=True)

    def _stop_all(self, state: _LocalJob) -> None:
        for replica in state.replicas:
            replica.restart_at = None
        self._stop(state.replicas)

    def _stop(self, replicas: list[LocalReplica]) -> None:
        """SIGTERM each replica's whole tree, SIGKILL what is left after the grace period (its supervisor does both)."""
        running = [r for r in replicas if r.proc is not None]
        if not running:
            return
        codes = stop_replicas([r.proc for r in running if r.proc is not None])
        for replica in running:
            if replica.proc is None:
                continue
            replica.last_exit = codes.get(replica.proc.pid, replica.last_exit)
            self._drain(replica)
            replica.proc = None


def _labels(state: _LocalJob) -> list[str]:
    """Every replica the job has started, in the order it started them (a scaled-down one stays: its log does)."""
    return [r.id.label for r in state.replicas]

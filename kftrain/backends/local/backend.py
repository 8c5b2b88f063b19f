"""The operator on one machine: the lifecycle of a job whose replicas are local processes (submit, the wait loop,
starting and stopping replicas, scaling, cancel).

Each replica that runs a program is a process under its own supervisor (:mod:`.processes`: its whole tree stops as
one); ``restartPolicy``, ``backoffLimit``, ``activeDeadlineSeconds`` and the kind's success rule are applied as its
operator would (:mod:`.exits`); output is streamed with a ``[worker-1]`` prefix and kept whole (:mod:`.output`);
``scale`` and ``kill_replica`` act as ``kubectl scale`` and a lost node would. On purpose, unlike a cluster: images
are ignored, sidecars are not run, ``Always`` treats an exit 0 as done, and a ``secretKeyRef`` is read from this
process's environment under the same name.
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import shutil
import signal
import string
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult, JobStatus
from kftrain.backends.console import Console
from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as job_state
from kftrain.backends.local.config import LocalConfig
from kftrain.backends.local.exits import RestartAll, blame_crash_loop, exited
from kftrain.backends.local.hosted import lose_hosted, scale_hosted, write_mounted
from kftrain.backends.local.one_machine import local_host_of
from kftrain.backends.local.output import open_logs_folder, open_replica_log, pump
from kftrain.backends.local.processes import ReplicaProcess, stop_replicas
from kftrain.backends.local.replica import LocalReplica, free_port, prepare_replica
from kftrain.backends.local.running import RunningJob, record_cancel, record_end, record_start
from kftrain.backends.local.status_server import StatusServer
from kftrain.backends.local.workdirs import (
    SCRATCH_PREFIX,
    WorkdirClaim,
    claim_workdir,
    prune_finished,
    replica_cwd,
    workdir_prefix,
)
from kftrain.backends.local.workspace import give_workspace
from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_of
from kftrain.job.model import TrainingJob
from kftrain.job.topology import LOCAL_HOST, ReplicaId, Topology, all_replicas
from kftrain.job.validate import validate_job
from kftrain.signals import shielded


class LocalBackend(Backend):
    name = "local"
    config: LocalConfig

    def __init__(self, config: LocalConfig | None = None) -> None:
        self.config = config or LocalConfig()
        self.console = Console(self.config.out, self.config.line_sinks)
        self._jobs: dict[str, RunningJob] = {}
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
        kind.check_local(job)  # what cannot run on this machine, said before anything of it exists
        # One job of a name at a time, as on a cluster: refused before anything of it exists.
        name_lock = job_state.claim_name(job.name, f"{kind.spec.plural}.{kind.spec.group}")
        owns = self.config.workdir is None
        try:
            prune_finished(self.config.keep_finished, self.config.keep_finished_s)
            workdir = Path(self.config.workdir or tempfile.mkdtemp(prefix=workdir_prefix(job.name)))
        except BaseException:
            job_state.release(name_lock)
            raise
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            claim = claim_workdir(workdir, job.name)  # one running job per work folder
        except BaseException:
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            job_state.release(name_lock)
            raise
        topology = Topology(
            ports={r: free_port() for r in kind.listening_replicas(job)},
            files_root=workdir,
            host_of=local_host_of(LOCAL_HOST),
        )
        server: StatusServer | None = None
        logs_fd: int | None = None
        # Short, outside the work folder: MPI's session sockets live under TMPDIR, and a socket's path is short. Held
        # as the work folder is, so that what a launcher killed outright left is found again by its token.
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        scratch_claim: WorkdirClaim | None = None
        shown = self.config.cwd or Path.cwd()
        try:
            scratch_claim = claim_workdir(scratch, job.name)
            logs_fd = open_logs_folder(workdir)
            if kind.reports_status(job):
                namespace = job.metadata.namespace or "default"
                server = StatusServer(namespace, job.name, workdir / "trainer-status", self._report_progress)
                topology.status = server.start()
            cwd = replica_cwd(workdir, shown)
            initializers = [
                self._prepare(job, rid, topology, workdir, scratch) for rid in kind.initializer_replicas(job)
            ]
            replicas = [self._prepare(job, rid, topology, workdir, scratch) for rid in kind.process_replicas(job)]
            give_workspace(
                job,
                workdir,
                [*initializers, *replicas],
                private=self.config.private_workspace,
                say=self.console.say,
            )
        except BaseException:
            if server is not None:
                server.stop()
            if logs_fd is not None:
                os.close(logs_fd)
            shutil.rmtree(scratch, ignore_errors=True)
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            claim.release()
            if scratch_claim is not None:
                scratch_claim.release()
            job_state.release(name_lock)
            raise
        write_mounted(topology, kind.operator_files(job, topology))
        processes = {r.id for r in replicas}
        state = RunningJob(
            job=job,
            workdir=workdir,
            cwd=cwd,
            scratch=scratch,
            owns_workdir=owns,
            shown=shown,
            replicas=[*initializers, *replicas],
            started_at=time.monotonic(),
            topology=topology,
            hosted=[r for r in all_replicas(job) if r.type == "Worker" and r not in processes],
            next_hosted=job.replicas_of("Worker"),
            initializers=initializers,
            waiting=replicas if initializers else [],
            status_server=server,
            name_lock=name_lock,
            workdir_claim=claim,
            scratch_claim=scratch_claim,
            logs_fd=logs_fd,
        )
        self._jobs[job.name] = state
        first = initializers or replicas
        then = f"; then {', '.join(r.id.label for r in replicas)}" if initializers else ""
        self.console.say(
            f"starting {job.kind} {job.name}: {', '.join(r.id.label for r in first)}{then} (workdir {workdir})"
        )
        record_start(state, self.console)
        try:
            for replica in first:
                self._start(replica, state)
        except BaseException:
            # A replica that could not start fails the submit; those already started must not outlive it.
            with shielded():
                self._stop(state.replicas)
                self._stop_server(state)
                del self._jobs[job.name]
                shutil.rmtree(scratch, ignore_errors=True)
                if owns:
                    shutil.rmtree(workdir, ignore_errors=True)
                state.release()
            raise
        return self._handle(job)

    def _report_progress(self, status: Mapping[str, Any]) -> None:
        """A progress report a node posted to the job's status server: to every progress sink."""
        for sink in self.config.progress_sinks:
            with contextlib.suppress(Exception):  # what watches the job must never end it
                sink(status)

    def _stop_server(self, state: RunningJob) -> None:
        if state.status_server is not None:
            state.status_server.stop()
            state.status_server = None

    def _handle(self, job: TrainingJob) -> JobHandle:
        return JobHandle(backend=self.name, name=job.name, kind=job.kind, api_version=job.api_version)

    def _prepare(
        self, job: TrainingJob, rid: ReplicaId, topology: Topology, workdir: Path, scratch: Path
    ) -> LocalReplica:
        return prepare_replica(job, rid, topology, self.config, workdir / "logs", scratch)

    def _start(self, replica: LocalReplica, state: RunningJob) -> None:
        # Its log is opened now, through the job's logs folder, not by path in the reader: the job is recorded as
        # running before this, and its work folder may be swapped for a link by then.
        log_file = open_replica_log(state.logs_fd, replica.log_path) if state.logs_fd is not None else None
        cwd = state.cwd
        replica.proc = ReplicaProcess(replica.argv, replica.env, cwd, replica.grace_s)
        replica.restart_at = None

        def on_line(line: str) -> None:
            replica.tail.append(line)
            self.console.replica_line(replica.id.label, line)

        replica.reader = threading.Thread(
            target=pump, args=(replica.proc.stdout, log_file, replica.log_path, on_line), daemon=True
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
                blame_crash_loop(state, result)
            if result is not None:
                self._stop_all(state)
                self._stop_server(state)
                result.duration_s = time.monotonic() - state.started_at
                state.result = result
                record_end(state, result, self.console)
                return result
            time.sleep(self.config.poll_interval_s)

    def _step(self, state: RunningJob) -> JobResult | None:
        """Reap replicas that exited, restart or fail them per their policy (:mod:`.exits`); the job's result once it
        has one."""
        now = time.monotonic()
        for replica in state.replicas:
            if replica.finished:
                continue
            if replica.proc is None:
                if replica.restart_at is not None and now >= replica.restart_at:
                    self._start(replica, state)
                continue
            code = replica.proc.poll()
            if code is None:
                continue
            self._drain(replica)
            replica.proc = None
            result = exited(state, replica, code, now, self.config, self.console)
            if isinstance(result, RestartAll):
                self._restart_all(state, result)
                return None
            if result is not None:
                return result
        if state.waiting and all(r.succeeded for r in state.initializers):
            self.console.say(f"{', '.join(r.id.label for r in state.initializers)} completed: starting the job's nodes")
            started, state.waiting = state.waiting, []
            for replica in started:
                self._start(replica, state)
        if all(r.finished for r in state.replicas):
            return JobResult(
                JobPhase.FAILED,
                reason="SuccessPolicyNotMet",
                message="every replica exited but the job's success rule was not met",
            )
        return None

    def _restart_all(self, state: RunningJob, why: RestartAll) -> None:
        """Stop every replica and start them all anew, as JobSet does when its failurePolicy restarts it: it deletes
        every Job (their pods with them) and creates them again, new Jobs with their own backoff counts, the
        initializers first when the nodes depend on them (kubernetes-sigs/jobset@v0.12.0:
        pkg/controllers/failure_policy.go, failurePolicyRecreateAll; jobset_controller.go, deleteJobs)."""
        state.whole_restarts += 1
        state.whole_restarts_counted += why.counted
        self.console.say(f"{why.message}: restarting the whole job (restart {state.whole_restarts})")
        self._stop_all(state)
        state.restarts.clear()
        for replica in state.replicas:
            replica.restarts = 0
            replica.succeeded = replica.finished = False
        first = state.initializers or state.replicas
        state.waiting = [r for r in state.replicas if r not in state.initializers] if state.initializers else []
        for replica in first:
            self._start(replica, state)

    # -- elastic scaling and fault injection -------------------------------------------------------

    def scale(self, handle: JobHandle, replica_type: str, replicas: int) -> None:
        """Change a running job's replica count, as ``kubectl scale`` (or an HPA) does on a cluster.

        New replicas get the next indices and the same contract; removed ones (highest indices first)
        are stopped. Elastic PyTorchJobs admit workers between min and maxReplicas.
        """
        with self._state_lock:
            self._scale(self._jobs[handle.name], replica_type, replicas)

    def _scale(self, state: RunningJob, replica_type: str, replicas: int) -> None:
        job = state.job
        bounds = kind_of(job).worker_bounds(job)
        if bounds is not None and replica_type == "Worker":
            low, high = bounds[0], bounds[1] or replicas
            if not low <= replicas <= high:
                raise JobSpecError("spec.elasticPolicy", f"{replicas} workers is outside [{low}, {high}]")
        if replica_type == "Worker" and not kind_of(job).spec.workers_run_program:
            scale_hosted(state, replicas, self.console)
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
            self._start(replica, state)
        for replica in sorted(live, key=lambda r: r.id.index, reverse=True)[: max(0, len(live) - replicas)]:
            self.console.say(f"scaled {replica_type} down: stopping {replica.id.label}")
            replica.finished = True
            self._stop([replica])
        job.replica_specs[replica_type].replicas = replicas
        job_state.write(job.name, replicas=state.labels())  # `kftrain jobs logs` reads the new ones too

    def kill_replica(self, handle: JobHandle, label: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one replica's whole process tree, as a node loss or OOM kill would.

        A worker that runs no program (an MPIJob's) is lost: it leaves the operator's files and ``sig`` goes to
        the ranks the launcher placed on it.
        """
        state = self._jobs[handle.name]
        with self._state_lock:
            if lose_hosted(state, label, sig, self.console):
                return
        replica = next((r for r in state.replicas if r.id.label == label), None)
        if replica is None or replica.proc is None:
            raise KeyError(f"{label}: no running replica of that name")
        for proc in replica.proc.program_tree():  # not its supervisor: it sees the program die, and cleans up
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def _drain(self, replica: LocalReplica) -> None:
        # The reader ends at EOF; a grandchild still holding the pipe must not hang us.
        if replica.reader is not None:
            replica.reader.join(timeout=2.0)

    # -- the jobs recorded on this machine (any launcher's) ------------------------------------------

    def list_jobs(self) -> list[JobStatus]:
        return local_jobs.list_jobs(self.config.every_user)

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
        record_cancel(state, self.console)

    def _stop_all(self, state: RunningJob) -> None:
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

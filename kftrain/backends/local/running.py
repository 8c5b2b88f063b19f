"""A job the local backend runs: what it holds while the job runs (:class:`RunningJob`), and the job's record in the
state folder (:mod:`.state`, read by ``kftrain jobs``) as it starts, ends or is cancelled, with what an ended job
leaves behind (its logs' ends kept; its scratch folder removed, its work folder too when it succeeded in one of its
own). While it runs it holds its name (:func:`.state.claim_name`) and its work folder (:func:`.workdirs.claim_workdir`),
and lets both go when it ends, however it ends."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.local import state as job_state
from kftrain.backends.local.replica import LocalReplica
from kftrain.backends.local.status_server import StatusServer
from kftrain.backends.local.workdirs import WorkdirClaim
from kftrain.job.model import TrainingJob
from kftrain.job.naming import outputs_of
from kftrain.job.topology import ReplicaId, Topology


@dataclass
class RunningJob:
    """A job this backend started and has not forgotten: its replicas, its folders, where they listen."""

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
    # What the job holds while it runs: the lock on its name, and its work folder.
    name_lock: int | None = None
    workdir_claim: WorkdirClaim | None = None

    def release(self) -> None:
        """Let go of the job's name and work folder: the job has ended (or never started)."""
        job_state.release(self.name_lock)
        self.name_lock = None
        if self.workdir_claim is not None:
            self.workdir_claim.release()
            self.workdir_claim = None

    def workers_running(self) -> int:
        return sum(1 for r in self.replicas if r.id.type == "Worker" and not r.finished)

    def labels(self) -> list[str]:
        """Every replica the job has started, in the order it started them (a scaled-down one stays: its log does)."""
        return [r.id.label for r in self.replicas]


def record_start(state: RunningJob) -> None:
    """The job's entry in the state folder (``kftrain jobs``): running, with where its logs are."""
    model_uri, logs_uri = outputs_of(state.job.metadata.annotations)
    claim = state.workdir_claim
    job_state.write(
        state.job.name,
        fresh=True,  # one record per job: nothing an ended job of that name recorded is this one's
        kind=state.job.kind,
        api_version=state.job.api_version,
        labels=dict(state.job.metadata.labels or {}),
        **job_state.launcher_identity(),
        phase=job_state.RUNNING,
        workdir=str(state.workdir),
        workdir_owned=state.owns_workdir,
        # What pruning checks before it removes the folder (kftrain.backends.local.workdirs.remove_owned).
        workdir_token=claim.token if claim is not None and state.owns_workdir else None,
        replicas=state.labels(),
        model_uri=model_uri,
        logs_uri=logs_uri,
    )


def record_end(state: RunningJob, result: JobResult, console: Console) -> None:
    """The job ended with ``result``: its entry says so, its logs' ends are kept beside it, and its folders go."""
    console.say(f"{state.job.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
    job_state.write(
        state.job.name,
        phase=result.phase.value,
        reason=result.reason,
        message=result.message,
        exit_code=result.exit_code,
        workdir_kept=not (result.succeeded and state.owns_workdir),
    )
    job_state.keep_logs(state.job.name, state.workdir / "logs", state.labels())
    shutil.rmtree(state.scratch, ignore_errors=True)
    if result.succeeded and state.owns_workdir:
        shutil.rmtree(state.workdir, ignore_errors=True)
    state.release()
    if not result.succeeded:
        console.say(f"replica logs kept in {state.workdir / 'logs'}")


def record_cancel(state: RunningJob, console: Console) -> None:
    """The job was cancelled (its replicas already stopped): its result, unless it had one, and its scratch gone."""
    if state.result is None:
        state.result = JobResult(JobPhase.FAILED, reason="Cancelled", message="job cancelled", exit_code=143)
        job_state.write(state.job.name, phase=JobPhase.FAILED.value, reason="Cancelled", exit_code=143)
        job_state.keep_logs(state.job.name, state.workdir / "logs", state.labels())
        console.say(f"{state.job.name} cancelled; every replica stopped")
    shutil.rmtree(state.scratch, ignore_errors=True)
    state.release()

"""A job the local backend runs: what it holds while the job runs (:class:`RunningJob`), and the job's record in the
state folder (:mod:`.state`, read by ``kftrain jobs``) as it starts, ends or is cancelled, with what an ended job
leaves behind: however it ends, its logs' ends and the files its replicas wrote are kept in the state folder, and its
scratch folder and the work folder the backend made for it are removed (:mod:`.workdirs`). While it runs it holds its
name (:func:`.state.claim_name`), its work folder and its scratch folder (:func:`.workdirs.claim_workdir`), and lets
them go when it ends, however it ends."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.local import state as job_state
from kftrain.backends.local.replica import LocalReplica
from kftrain.backends.local.status_server import StatusServer
from kftrain.backends.local.workdirs import WorkdirClaim, keep_files, remove_owned
from kftrain.backends.safe_paths import UnsafePath
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
    shown: Path  # the launch folder its replicas' working folder shows
    replicas: list[LocalReplica]
    started_at: float
    topology: Topology
    # Workers that run no program here (an MPIJob's), which the operator's files list while they "run".
    hosted: list[ReplicaId]
    next_hosted: int = 0
    # Restarts made so far, by whoever counts them (kftrain.job.kinds.restarts.Backoff.job; "": the job's operator).
    restarts: Counter[str] = field(default_factory=Counter)
    # Restarts of the whole job (a TrainJob's JobSet recreating its Jobs), and those that count towards its limit.
    whole_restarts: int = 0
    whole_restarts_counted: int = 0
    result: JobResult | None = None
    # Replicas that run to completion first (a TrainJob's initializers), and those that start once they have.
    initializers: list[LocalReplica] = field(default_factory=list)
    waiting: list[LocalReplica] = field(default_factory=list)
    status_server: StatusServer | None = None
    left: bool = False  # what it leaves is kept and its folders removed (:func:`_leave`)
    # What the job holds while it runs: the lock on its name, its work folder and its scratch folder.
    name_lock: int | None = None
    workdir_claim: WorkdirClaim | None = None
    scratch_claim: WorkdirClaim | None = None
    logs_fd: int | None = None  # its logs folder, open (kftrain.backends.local.output.open_logs_folder)

    def release(self) -> None:
        """Let go of the job's name and folders: the job has ended (or never started)."""
        if self.logs_fd is not None:
            os.close(self.logs_fd)
            self.logs_fd = None
        job_state.release(self.name_lock)
        self.name_lock = None
        for claim in (self.workdir_claim, self.scratch_claim):
            if claim is not None:
                claim.release()
        self.workdir_claim = self.scratch_claim = None

    def workers_running(self) -> int:
        return sum(1 for r in self.replicas if r.id.type == "Worker" and not r.finished)

    def labels(self) -> list[str]:
        """Every replica the job has started, in the order it started them (a scaled-down one stays: its log does)."""
        return [r.id.label for r in self.replicas]


def record_start(state: RunningJob, console: Console) -> None:
    """The job's entry in the state folder (``kftrain jobs``): running, with where its logs are. It replaces the
    record of an ended job of that name, with what that job left (said, when it left something)."""
    name = state.job.name
    previous = job_state.read(name)
    if previous is not None:
        remove_owned(previous)  # the folders of a job whose launcher died, which no record would name any more
        left = [p for p in (job_state.logs_dir(name), job_state.files_dir(name)) if p.exists()]
        if left:
            console.say(f"{name}: forgetting what the ended job of this name left ({', '.join(map(str, left))})")
        job_state.drop_kept(name)
    model_uri, logs_uri = outputs_of(state.job.metadata.annotations)
    claim, scratch = state.workdir_claim, state.scratch_claim
    job_state.write(
        name,
        fresh=True,  # one record per job: nothing an ended job of that name recorded is this one's
        kind=state.job.kind,
        api_version=state.job.api_version,
        labels=dict(state.job.metadata.labels or {}),
        **job_state.launcher_identity(),
        phase=job_state.RUNNING,
        workdir=str(state.workdir),
        workdir_owned=state.owns_workdir,
        # What removing the folders checks first (kftrain.backends.local.workdirs.remove_owned), should the launcher
        # die before it removes them itself.
        workdir_token=claim.token if claim is not None and state.owns_workdir else None,
        scratch=str(state.scratch),
        scratch_token=scratch.token if scratch is not None else None,
        replicas=state.labels(),
        model_uri=model_uri,
        logs_uri=logs_uri,
    )


def record_end(state: RunningJob, result: JobResult, console: Console) -> None:
    """The job ended with ``result``: its entry says so, and it leaves what :func:`_leave` keeps."""
    console.say(f"{state.job.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
    outcome: dict[str, Any] = {"reason": result.reason, "message": result.message, "exit_code": result.exit_code}
    job_state.write(state.job.name, phase=result.phase.value, **outcome)
    _leave(state, console)
    if not result.succeeded:
        console.say(f"replica logs kept in {job_state.logs_dir(state.job.name)} (kftrain jobs logs {state.job.name})")


def record_cancel(state: RunningJob, console: Console) -> None:
    """The job was cancelled (its replicas already stopped): its result, unless it had one, and what it leaves."""
    if state.result is None:
        state.result = JobResult(JobPhase.FAILED, reason="Cancelled", message="job cancelled", exit_code=143)
        job_state.write(state.job.name, phase=JobPhase.FAILED.value, reason="Cancelled", exit_code=143)
        console.say(f"{state.job.name} cancelled; every replica stopped")
    _leave(state, console)


def _leave(state: RunningJob, console: Console) -> None:
    """What an ended job leaves, however it ended: its logs' ends and the files its replicas wrote, in the state
    folder (each file named); nothing else of it, in the temporary folder or elsewhere, but a ``--workdir`` the user
    gave. Done once: a job cancelled after its end has left already."""
    if state.left:
        return
    state.left = True
    name = state.job.name
    try:
        job_state.keep_logs(name, state.workdir / "logs", state.labels())
    except UnsafePath as exc:  # placed in the state folder while the job ran: nothing is written through it
        console.say(f"{name}: logs not kept: {exc}")
    unsafe = False
    if state.owns_workdir:
        # The initializers' downloads are the job's inputs (kubeflow/trainer@v2.3.0 pkg/constants/constants.go:
        # DatasetMountPath /workspace/dataset, ModelMountPath /workspace/model), not what it made.
        downloads = ("dataset", "model") if state.initializers else ()
        try:
            kept = keep_files(state.workdir, state.cwd, state.shown, job_state.files_dir(name), downloads)
        except UnsafePath as exc:
            unsafe = True  # its files stay where they are, named, rather than go
            console.say(f"{name}: files not kept: {exc}; they stay in {state.workdir}")
        else:
            for line in kept.describe(name):
                console.say(line)
    shutil.rmtree(state.scratch, ignore_errors=True)
    if state.owns_workdir and not unsafe:
        shutil.rmtree(state.workdir, ignore_errors=True)
    state.release()

"""What a replica's exit means for its job, as the operator decides it.

The replica's restart policy (Never, OnFailure, Always, ExitCode) within the backoffLimit of whoever restarts it
(:class:`~kftrain.job.kinds.restarts.Backoff`), with a growing delay; what the owner of a failed batch Job does (a
TrainJob's JobSet may restart the whole job); the kind's success rule; whether an elastic job survives the loss; and,
when the job fails, the result naming the failing replica with its exit code and last lines."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.local.config import LocalConfig
from kftrain.backends.local.processes import shell_exit_code
from kftrain.backends.local.replica import LocalReplica
from kftrain.backends.local.running import RunningJob
from kftrain.job.kinds import kind_of


@dataclass(frozen=True)
class RestartAll:
    """The whole job is to be restarted, every replica anew (a TrainJob's JobSet recreating its Jobs), ``counted``
    towards its limit or not; ``message`` says why."""

    counted: bool
    message: str


def exited(
    state: RunningJob, replica: LocalReplica, code: int, now: float, config: LocalConfig, console: Console
) -> JobResult | RestartAll | None:
    """``replica`` (its process reaped) exited with ``code`` at ``now``: it is done, lost, or due for a restart (its
    ``restart_at``); the job's result when that ends the job, or :class:`RestartAll` when its failure restarts the
    whole job (:meth:`~kftrain.job.kinds.base.Kind.after_job_failure`)."""
    job, kind = state.job, kind_of(state.job)
    replica.last_exit = code
    if code == 0:
        replica.succeeded = replica.finished = True
        console.say(f"{replica.id.label} succeeded")
        if kind.succeeded(job, {r.id for r in state.replicas if r.succeeded}):
            return JobResult(JobPhase.SUCCEEDED, reason="Succeeded", message=f"{job.name} succeeded")
        return None
    exit_code = shell_exit_code(code)
    backoff = kind.backoff(job, replica.id.type)
    if not backoff.retries(replica.policy, code):
        if kind.survives_loss(job, replica.id, state.workers_running() - 1):
            replica.finished = True
            console.say(
                f"{replica.id.label} exited with code {exit_code}; the elastic job goes on with "
                f"{state.workers_running()} worker(s)"
            )
            return None
        return failure(replica, "ReplicaFailed", f"{replica.id.label} exited with code {exit_code}", state)
    counted = state.restarts[backoff.job or ""]
    if backoff.spent(replica.policy, counted):
        if backoff.in_place(replica.policy):
            why = f"restarting it would make {counted + 1} restart(s) of {backoff.counted()}'s pods"
        else:
            why = f"{counted + 1} of {backoff.counted()}'s pods have failed"
        restarted = _restarted(state, replica, counted, backoff.counted(), now)
        message = (
            f"{replica.id.label} exited with code {exit_code}{restarted}; {why}, and backoffLimit is {backoff.limit}"
        )
        after = kind.after_job_failure(job, replica.id.type, state.whole_restarts_counted) if backoff.job else None
        if after is None:
            return failure(replica, "BackoffLimitExceeded", message, state)
        if not after.restart:
            return failure(replica, after.reason, f"{message}; {after.why}", state)
        return RestartAll(counted=after.counted, message=f"{message}; {after.why}")
    delay = min(config.restart_backoff_s * 2**replica.restarts, config.max_restart_backoff_s)
    replica.restarts += 1
    state.restarts[backoff.job or ""] = counted + 1
    replica.restart_at = now + delay
    bound = f"/{backoff.limit}" if backoff.limit is not None and backoff.counts(replica.policy) else ""
    where = f" of {backoff.counted()}" if backoff.job else ""
    console.say(
        f"{replica.id.label} exited with code {exit_code}; restartPolicy {replica.policy.value}: "
        f"restart {counted + 1}{bound}{where} in {delay:.1f}s"
    )
    return None


def _restarted(state: RunningJob, replica: LocalReplica, counted: int, where: str, now: float) -> str:
    """`` after N restart(s) of X's pods in Ts (...)``: why a program that fails at once took this long to fail the
    job; "" when nothing was restarted."""
    if not counted:
        return ""
    return (
        f" after {counted} restart(s) of {where}'s pods in {now - state.started_at:.0f}s (restartPolicy "
        f"{replica.policy.value} restarts it on this exit code; Never fails the job at once)"
    )


def own_paths(state: RunningJob, lines: list[str]) -> list[str]:
    """``lines`` with each path through the replicas' working folder (a link farm of the launch folder,
    :func:`~kftrain.backends.local.workdirs.replica_cwd`) written as the user's own file in the launch folder: a
    traceback names the user's script, not a folder that goes with the job."""
    folders = sorted({str(state.cwd), str(state.cwd.resolve())}, key=len, reverse=True)
    pattern = re.compile(f"(?:{'|'.join(map(re.escape, folders))})/([^/\\s\"']+)")

    def mapped(found: re.Match[str]) -> str:
        entry = state.cwd / found.group(1)
        return os.readlink(entry) if entry.is_symlink() else found.group(0)

    return [pattern.sub(mapped, line) for line in lines]


def failure(replica: LocalReplica, reason: str, message: str, state: RunningJob) -> JobResult:
    """The job failed for ``replica``, which is done for: its exit code and its last lines."""
    replica.finished = True
    return JobResult(
        JobPhase.FAILED,
        reason=reason,
        message=message,
        exit_code=shell_exit_code(replica.last_exit or 1),
        failed_replica=replica.id.label,
        log_tail=own_paths(state, list(replica.tail)),
    )


def blame_crash_loop(state: RunningJob, result: JobResult) -> None:
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
    result.exit_code, result.failed_replica, result.log_tail = code, worst.id.label, own_paths(state, list(worst.tail))

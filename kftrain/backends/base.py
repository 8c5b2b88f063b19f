"""One interface for a training job's whole life, whatever runs it, and what every backend shares.

A backend is chosen by the type of its config (:func:`kftrain.backends.make_backend`). :meth:`Backend.run` runs a
job to its end: submit, write the job's identity where the caller asked (atomically, before any waiting, so a
restarted step finds the job), wait, and cancel the job on any interruption (SIGTERM, SIGHUP, Ctrl-C, an error while
waiting), shielded from further signals until everything it started has stopped; a SIGTERM the backend finds to be
its pod's eviction leaves the job to the step's retry (:meth:`Backend.left_running`). ``kftrain jobs`` lists, describes,
reads and deletes a backend's jobs through the same interface.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from kftrain.compat import StrEnum
from kftrain.job.model import TrainingJob
from kftrain.signals import Terminated, shielded, terminate_raises


class JobPhase(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass
class JobResult:
    phase: JobPhase
    reason: str = ""
    message: str = ""
    exit_code: int = 0
    failed_replica: str | None = None
    log_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.phase == JobPhase.SUCCEEDED

    def describe(self) -> str:
        """A message fit for a failed pipeline step: what failed, why, and its last log lines."""
        head = f"job {self.phase.value}"
        if self.reason:
            head += f" ({self.reason})"
        if self.message:
            head += f": {self.message}"
        if self.log_tail:
            who = self.failed_replica or "replica"
            head += f"\nlast {len(self.log_tail)} log lines of {who}:\n" + "\n".join(
                f"  {line}" for line in self.log_tail
            )
        return head


@dataclass(frozen=True)
class JobStatus:
    """A job a backend ran, as ``kftrain jobs`` shows it."""

    name: str
    kind: str
    phase: str
    created: float  # seconds since the epoch
    run_id: str = ""
    task_id: str = ""
    # What the backend knows beyond the phase: conditions, replicas, pods and their events, one line each.
    details: tuple[str, ...] = ()
    # Where the job's model and its replicas' kept logs are (kftrain.job.naming.outputs_of); "" when not recorded.
    model_uri: str = ""
    logs_uri: str = ""
    # Local folders holding what the ended job left (the local backend's state folder): the ends of its replicas'
    # logs (<replica>.log) and the files they wrote in their job's folders; "" where the backend keeps none.
    kept_logs: str = ""
    kept_files: str = ""


@dataclass(frozen=True)
class JobHandle:
    """Identifies a submitted job for its backend: written out before waiting, so a restart can reattach."""

    backend: str
    name: str
    namespace: str | None = None
    api_version: str | None = None
    kind: str | None = None
    uid: str | None = None


@dataclass
class BackendConfig:
    """What every backend takes; each backend's config adds its own fields."""

    # Where the job's identity (a JobHandle as JSON) is written before waiting; None: nowhere.
    identity_path: str | Path | None = None
    # Where the launcher's messages and the replicas' log lines go; None: standard output.
    out: IO[str] | None = None
    # How many of the failing replica's last log lines a failed job's message carries.
    log_tail_lines: int = 30
    # Called with (replica label, line) for every replica log line, on both backends alike (the launch step's
    # metrics collection and persisted logs); a sink that raises is ignored, never the job's end.
    line_sinks: list[Callable[[str, str], None]] = field(default_factory=list)
    # Called with every progress report the job's nodes post (a TrainJob's status.trainerStatus, as a mapping), on
    # both backends alike: the launch step's collector shows it beside the metrics lines.
    progress_sinks: list[Callable[[Mapping[str, Any]], None]] = field(default_factory=list)
    # The most replicas a job may have on this backend; a larger one is refused, naming its count, before any
    # replica is enumerated (a CRD allows 2**31 - 1). On a cluster the launch step follows one log stream and a
    # pod watch entry per replica; locally each replica is a process (LocalConfig lowers it).
    max_replicas: int = 1000

    # Why the limit is there and how to raise it, for the error.
    REPLICA_LIMIT_WHY: ClassVar[str] = (
        "more than {limit}: the launch step follows every replica's log; raise the backend config's max_replicas if "
        "it can"
    )

    def check_replicas(self, job: TrainingJob) -> None:
        """Refuse ``job`` when it has more than :attr:`max_replicas` replicas, before anything enumerates them."""
        from kftrain.job.validate import check_replica_count

        check_replica_count(job, self.max_replicas, self.REPLICA_LIMIT_WHY)


def publish_identity(handle: JobHandle, path: str | Path | None) -> None:
    """Write ``handle`` to ``path`` atomically: a reader never sees half a file."""
    if path is None or not str(path):
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(dataclasses.asdict(handle), sort_keys=True))
    tmp.replace(target)


def load_identity(path: str | Path) -> JobHandle:
    """The handle :func:`publish_identity` wrote to ``path``."""
    return JobHandle(**json.loads(Path(path).read_text()))


class Backend(abc.ABC):
    """Submit a job, wait for it to end, cancel it. Implementations: local processes, Kubernetes."""

    name: str
    config: BackendConfig

    @abc.abstractmethod
    def submit(self, job: TrainingJob) -> JobHandle:
        """Start the job (or attach to the same job already started) and return its handle.

        A submit that fails part-way leaves nothing running behind it.
        """

    @abc.abstractmethod
    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobResult:
        """Block until the job ends, streaming its replicas' logs; a timeout ends it as Failed."""

    @abc.abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job and everything it started. Safe to call more than once."""

    @abc.abstractmethod
    def list_jobs(self) -> list[JobStatus]:
        """The jobs kftrain ran on this backend, newest first."""

    @abc.abstractmethod
    def get_job(self, name: str) -> JobStatus:
        """Job ``name``; a :class:`~kftrain.errors.KftrainError` naming where it looked when there is none."""

    @abc.abstractmethod
    def job_logs(
        self, name: str, replica: str | None = None, tail: int | None = None, follow: bool = False
    ) -> Iterator[tuple[str, str]]:
        """``(replica, line)`` for the replicas' logs (live, else kept): every replica's or ``replica``'s, the last
        ``tail`` lines of each; ``follow``: then the lines written while the job runs, until it ends."""

    @abc.abstractmethod
    def delete_job(self, name: str) -> None:
        """Stop job ``name`` if it runs, and forget it."""

    def left_running(self, handle: JobHandle) -> str:
        """Why this SIGTERM leaves the job running, for the step's retry to reattach; "" (here, always): cancel it."""
        return ""

    def run(self, job: TrainingJob, timeout: float | None = None) -> JobResult:
        """Submit ``job``, publish its identity, wait for its end; cancel it on any interruption but a SIGTERM
        :meth:`left_running` explains (then :class:`JobLeftRunning`)."""
        with terminate_raises():
            handle: JobHandle | None = None
            try:
                handle = self.submit(job)
                publish_identity(handle, self.config.identity_path)
                return self.wait(handle, timeout)
            except BaseException as exc:
                if handle is None:
                    raise
                with shielded():  # a second signal must not cut the stop short
                    evictable = isinstance(exc, Terminated) and exc.signum == signal.SIGTERM  # what a kubelet sends
                    why = self.left_running(handle) if evictable else ""
                    if not why:
                        self.cancel(handle)
                if why and isinstance(exc, Terminated):
                    raise JobLeftRunning(exc.signum, why) from exc
                raise


class JobLeftRunning(Terminated):
    """A SIGTERM that left the job running (the step's pod is evicted): ``left_running`` says why."""

    def __init__(self, signum: int, why: str) -> None:
        super().__init__(signum)
        self.left_running = why

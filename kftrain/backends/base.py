"""One interface for running a training job, whatever runs it."""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field

from kftrain.job.model import TrainingJob


class JobPhase(enum.StrEnum):
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
class JobHandle:
    """Identifies a submitted job for its backend: written out before waiting, so a restart can reattach."""

    backend: str
    name: str
    namespace: str | None = None
    api_version: str | None = None
    kind: str | None = None
    uid: str | None = None


class Backend(abc.ABC):
    """Submit a job, wait for it to end, cancel it. Implementations: local processes, Kubernetes."""

    name: str

    @abc.abstractmethod
    def submit(self, job: TrainingJob) -> JobHandle:
        """Start the job (or attach to the same job already started) and return its handle."""

    @abc.abstractmethod
    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobResult:
        """Block until the job ends, streaming its replicas' logs; a timeout ends it as Failed."""

    @abc.abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the job and everything it started. Safe to call more than once."""

    def run(self, job: TrainingJob, timeout: float | None = None) -> JobResult:
        """Submit, wait, and cancel on interruption (Ctrl-C, SIGTERM turned into KeyboardInterrupt)."""
        handle = self.submit(job)
        try:
            return self.wait(handle, timeout)
        except BaseException:
            self.cancel(handle)
            raise

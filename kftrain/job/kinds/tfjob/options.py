"""The launch inputs a TFJob adds, and this release's TensorFlow program."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds import programs
from kftrain.job.kinds.options import KindOptions, Program, launch_input


@dataclass
class TFJobOptions(KindOptions):
    """Workers only: MultiWorkerMirroredStrategy; with ``ps`` parameter servers and a ``chief``:
    ParameterServerStrategy, the chief coordinating; an ``evaluator`` evaluates checkpoints beside the training."""

    chief: int = launch_input(0, "Chief replicas: 0 or 1 (the job succeeds when the chief does).")
    ps: int = launch_input(0, "Parameter server replicas (0: no ParameterServerStrategy).")
    workers: int = launch_input(2, "Worker replicas.")
    evaluator: int = launch_input(0, "Evaluator replicas: 0 or 1.")

    def validate(self) -> None:
        for field in ("chief", "ps", "workers", "evaluator"):
            setattr(self, field, check.integer(field, getattr(self, field), low=0, high=check.INT32_MAX))
        for name, value in (("chief", self.chief), ("evaluator", self.evaluator)):
            if value not in (0, 1):
                raise JobSpecError(name, f"must be 0 or 1, got {value}")
        for name, value in (("ps", self.ps), ("workers", self.workers)):
            if value < 0:
                raise JobSpecError(name, f"must be >= 0, got {value}")
        if self.ps and not self.chief:
            raise JobSpecError("chief", "ParameterServerStrategy needs a chief (the coordinator) when ps > 0")

    def replica_counts(self) -> dict[str, int]:
        counts = {"Chief": self.chief, "PS": self.ps, "Worker": self.workers, "Evaluator": self.evaluator}
        return {rtype: count for rtype, count in counts.items() if count}

    def default_program(self, runtimes: Any = None) -> Program:
        return programs.TF_DISTRIBUTED

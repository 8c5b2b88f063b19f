"""A constant global batch at any world size: what each process computes, and in which order the rows come.

An elastic job that kept each process's batch would change the global batch (and the gradient noise, and the right
learning rate) at every resize. Here :func:`plan_batch` splits a fixed global batch into ``world_size`` parts of
``accumulation`` micro-batches of at most ``max_micro_batch`` rows; :class:`GlobalOrder` draws one permutation per
epoch from the seed, so a step's rows do not depend on the world size; :class:`SamplerPosition` (saved with a
checkpoint) resumes at another size with exactly the next global batch. Standard library and numpy only, for scripts
of your own: docs/elastic-and-fault-tolerance.md, examples/elastic/ddp_global_batch.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kftrain.errors import KftrainError

FLAG = "--global-batch-size"


class GlobalBatchError(KftrainError, ValueError):
    """A global batch the processes cannot share, or one larger than the data."""


@dataclass(frozen=True)
class BatchPlan:
    """How ``world_size`` processes compute one optimizer step over ``global_batch`` rows."""

    global_batch: int
    world_size: int
    micro_batch: int
    accumulation: int

    @property
    def per_process(self) -> int:
        """Rows each process computes per optimizer step."""
        return self.micro_batch * self.accumulation

    def describe(self) -> str:
        return (
            f"global batch {self.global_batch} = {self.world_size} process(es) x {self.accumulation} "
            f"micro-batch(es) of {self.micro_batch}"
        )


def plan_batch(global_batch: int, world_size: int, max_micro_batch: int | None = None) -> BatchPlan:
    """The split of ``global_batch`` among ``world_size`` processes, micro-batches at most ``max_micro_batch``.

    The accumulation is the fewest micro-batches that keep each at most ``max_micro_batch`` rows and all of
    equal size (so every row weighs the same in the averaged gradient).
    """
    if global_batch < 1:
        raise GlobalBatchError(f"{FLAG}: must be >= 1, got {global_batch}")
    if world_size < 1:
        raise GlobalBatchError(f"world size must be >= 1, got {world_size}")
    if global_batch % world_size:
        raise GlobalBatchError(
            f"{FLAG} {global_batch} cannot be split evenly among {world_size} processes: use a multiple of "
            f"every world size the job can take (here {world_size})"
        )
    per_process = global_batch // world_size
    limit = max(1, max_micro_batch or per_process)
    accumulation = next(a for a in range(1, per_process + 1) if per_process % a == 0 and per_process // a <= limit)
    return BatchPlan(global_batch, world_size, per_process // accumulation, accumulation)


def check_world_sizes(global_batch: int, world_sizes: range | list[int]) -> None:
    """Refuse, before training starts, a global batch that some world size the job can take cannot share."""
    bad = [w for w in world_sizes if w > 0 and global_batch % w]
    if bad:
        raise GlobalBatchError(
            f"{FLAG} {global_batch} cannot be split evenly among {', '.join(map(str, bad))} processes, world "
            f"sizes this elastic job can take ({min(world_sizes)} to {max(world_sizes)}): use a common multiple"
        )


@dataclass(frozen=True)
class SamplerPosition:
    """Where training is in the sample order: the epoch, and the global batches of it already trained on."""

    epoch: int = 0
    batches_done: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerPosition:
        return cls(int(data["epoch"]), int(data["batches_done"]))


class GlobalOrder:
    """The order rows are trained in: a per-epoch permutation of ``num_rows`` rows, in global-batch chunks.

    The last ``num_rows % global_batch`` rows of each epoch's permutation are left out (different rows every
    epoch), so every optimizer step has exactly ``global_batch`` rows.
    """

    def __init__(self, num_rows: int, global_batch: int, seed: int) -> None:
        if global_batch > num_rows:
            raise GlobalBatchError(f"{FLAG} {global_batch} is larger than the {num_rows} training rows")
        self.num_rows = num_rows
        self.global_batch = global_batch
        self.seed = seed
        self._epoch: int | None = None
        self._perm = np.arange(0)

    @property
    def steps_per_epoch(self) -> int:
        return self.num_rows // self.global_batch

    def permutation(self, epoch: int) -> np.ndarray:
        """The row order of ``epoch``: the same for every process and every world size."""
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)
            self._epoch = epoch
        return self._perm

    def global_rows(self, epoch: int, batch: int) -> np.ndarray:
        """The rows of global batch ``batch`` of ``epoch``."""
        if not 0 <= batch < self.steps_per_epoch:
            raise IndexError(f"global batch {batch} of an epoch of {self.steps_per_epoch}")
        start = batch * self.global_batch
        return self.permutation(epoch)[start : start + self.global_batch]

    def process_rows(self, epoch: int, batch: int, rank: int, world_size: int) -> np.ndarray:
        """Process ``rank``'s contiguous part of global batch ``batch`` of ``epoch``."""
        rows = self.global_rows(epoch, batch)
        share = self.global_batch // world_size
        return rows[rank * share : (rank + 1) * share]

    def micro_batches(self, epoch: int, batch: int, plan: BatchPlan, rank: int) -> list[np.ndarray]:
        """Process ``rank``'s part of global batch ``batch``, as ``plan.accumulation`` micro-batches."""
        rows = self.process_rows(epoch, batch, rank, plan.world_size)
        return [rows[i * plan.micro_batch : (i + 1) * plan.micro_batch] for i in range(plan.accumulation)]

    def micro_batch_seeds(self, epoch: int, batch: int, plan: BatchPlan, rank: int) -> list[int]:
        """A seed for each of :meth:`micro_batches`, from the seed, the step and where the micro-batch's rows begin
        in the global batch: the same micro-batch (the same rows, as when the micro-batch size does not change)
        gets the same seed at any world size, and after a resume. Seeding the framework's random numbers with it
        before each micro-batch makes its dropout masks the same too, so what is trained does not change with a
        resize (each process's own stream would otherwise draw them by how many micro-batches it had done)."""
        first = rank * plan.per_process
        return [
            int(np.random.SeedSequence([self.seed, epoch, batch, first + i * plan.micro_batch]).generate_state(1)[0])
            for i in range(plan.accumulation)
        ]

    def normalize(self, position: SamplerPosition) -> SamplerPosition:
        """``position`` with a finished epoch written as the start of the next one."""
        if position.batches_done >= self.steps_per_epoch:
            return SamplerPosition(position.epoch + 1, 0)
        return position


def world_sizes_of_elastic_job(env: dict[str, str]) -> range | None:
    """The world sizes an elastic PyTorchJob's processes can see, from the operator's ``PET_NNODES=min:max``
    and a numeric ``PET_NPROC_PER_NODE``; None when the job is not elastic (or the processes per node are a
    word such as ``auto``)."""
    nnodes, nproc = env.get("PET_NNODES", ""), env.get("PET_NPROC_PER_NODE", "1")
    if ":" not in nnodes or not nproc.isdigit():
        return None
    low, high = (int(n) for n in nnodes.split(":", 1))
    return range(low * int(nproc), high * int(nproc) + 1, int(nproc))

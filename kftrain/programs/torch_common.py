"""What the DDP and Horovod PyTorch programs share: flags, the batch plan, one optimizer step over a constant global
batch, checkpoints, and the validation accuracy they log.

Both read the rows in :class:`~kftrain.programs.global_batch.GlobalOrder`. A checkpoint is a ``ckpt-<step>`` folder
holding ``state.pt`` (model and optimizer ``state_dict``, step, sample position), snapshotted on the training thread
and serialized and uploaded on the checkpointer's.
"""

from __future__ import annotations

import argparse
import io
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn

from kftrain import storage
from kftrain.programs import checkpoint
from kftrain.programs.common import global_batch_size
from kftrain.programs.global_batch import BatchPlan, GlobalOrder, SamplerPosition, plan_batch

log = logging.getLogger("kftrain.trainer")

STATE_FILE = "state.pt"


def add_torch_flags(p: argparse.ArgumentParser) -> None:
    """The flags both PyTorch programs add to :func:`~kftrain.programs.common.trainer_parser`'s."""
    p.add_argument(
        "--checkpoints-in-flight",
        type=int,
        default=1,
        help="checkpoints that may upload in the background while training goes on (0: save synchronously)",
    )
    p.add_argument(
        "--log-samples", action="store_true", help="log the rows each process trains on at every step (drills)"
    )


def batch_plan(args: argparse.Namespace, world_size: int, global_batch: int | None = None) -> BatchPlan:
    """The plan of ``world_size`` processes for the global batch (the flags', unless given), logged with the
    learning rate, which belongs to the global batch: it changes only when the world size does."""
    plan = plan_batch(global_batch or global_batch_size(args, world_size), world_size, args.batch_size)
    log.info("world size %d: %s; lr %g for the global batch", world_size, plan.describe(), args.lr)
    return plan


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """The flags' learning rate, also over one restored from a checkpoint."""
    for group in opt.param_groups:
        group["lr"] = lr


def accumulate(
    model: Callable[[torch.Tensor], torch.Tensor],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    micro_batches: Sequence[np.ndarray],
    no_sync: Callable[[], AbstractContextManager[Any]] | None = None,
    seeds: Sequence[int] | None = None,
) -> float:
    """Forward and backward over ``micro_batches``, gradients summed into ``.grad`` as the mean over all their
    rows; returns that mean loss. ``no_sync`` (DDP's) defers the gradient allreduce to the last micro-batch.
    ``seeds`` (:meth:`GlobalOrder.micro_batch_seeds`) seed torch's random numbers before each micro-batch, so its
    dropout masks do not depend on the world size or on a resume."""
    total = 0.0
    for i, rows in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        if seeds is not None:
            torch.manual_seed(seeds[i])
        with nullcontext() if last or no_sync is None else no_sync():
            index = torch.from_numpy(rows)
            loss = loss_fn(model(x[index]), y[index]) / len(micro_batches)
            loss.backward()
        total += float(loss.detach())
    return total


def log_samples(step: int, position: SamplerPosition, batch: int, rank: int, world: int, rows: np.ndarray) -> None:
    log.info(
        "samples step %d epoch %d batch %d world %d rank %d rows %s",
        step,
        position.epoch,
        batch,
        world,
        rank,
        ",".join(str(int(r)) for r in rows),
    )


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """The share of rows ``model`` classifies right (NaN when there are none); leaves it in training mode."""
    if len(y) == 0:
        return float("nan")
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    model.train()
    return float((pred == y).mean())


def _clone(value: Any) -> Any:
    """A deep copy of a state_dict's tensors (what training goes on to change), sharing nothing with it."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_clone(v) for v in value)
    return value


def snapshot(model: nn.Module, opt: torch.optim.Optimizer, step: int, position: SamplerPosition) -> dict[str, Any]:
    """The checkpoint's content, copied in memory: training may change the model as soon as this returns."""
    return {
        "model": _clone(model.state_dict()),
        "optimizer": _clone(opt.state_dict()),
        "step": step,
        "position": position.to_dict(),
    }


def save_checkpoint(
    saver: checkpoint.Checkpointer, step: int, position: SamplerPosition, model: nn.Module, opt: torch.optim.Optimizer
) -> None:
    """Snapshot now, serialize and publish ``ckpt-<step>`` in the background (``saver`` bounds how many)."""
    state = snapshot(model, opt, step, position)

    def write(w: storage.ArtifactWriter) -> None:
        buf = io.BytesIO()
        torch.save(state, buf)
        w.write_bytes(STATE_FILE, buf.getvalue())

    saver.save(step, write, position.to_dict())


def load_checkpoint(uri: str) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` in the complete checkpoint at ``uri``."""
    storage.require_complete(uri)
    return torch.load(io.BytesIO(storage.read_bytes(storage.join(uri, STATE_FILE))), weights_only=True)


def restore(uri: str | None, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, SamplerPosition]:
    """Load the checkpoint at ``uri`` into ``model`` and ``opt``: the step and sample position to resume at
    ((0, start) when ``uri`` is None)."""
    if uri is None:
        return 0, SamplerPosition()
    state = load_checkpoint(uri)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    step = int(state["step"])
    if "position" in state:
        position = SamplerPosition.from_dict(state["position"])
    else:  # written before positions were saved: "epoch" was the last finished one
        position = SamplerPosition(int(state["epoch"]) + 1, 0)
    log.info(
        "resumed from checkpoint %s at step %d (epoch %d, %d global batches of it done)",
        uri,
        step,
        position.epoch,
        position.batches_done,
    )
    return step, position


def latest_uri(root: str) -> str | None:
    """The newest complete checkpoint under ``root`` (None when there is none, or no ``root``)."""
    found = checkpoint.latest_checkpoint(root) if root else None
    return found[1] if found else None


def epoch_batches(order: GlobalOrder, position: SamplerPosition, epoch: int) -> range:
    """The global batches of ``epoch`` still to train, resuming at ``position``."""
    return range(position.batches_done if epoch == position.epoch else 0, order.steps_per_epoch)

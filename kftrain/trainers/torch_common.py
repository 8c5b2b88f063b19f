"""What the two PyTorch trainers (DDP in :mod:`~kftrain.trainers.torch_ddp`, Horovod in
:mod:`~kftrain.trainers.horovod_torch`) share: each replica's training data, checkpoints of model and
optimizer, and the validation accuracy they log.

A checkpoint is a complete ``ckpt-<step>`` folder (see :mod:`kftrain.trainers.checkpoint`) holding
``state.pt``: the model's and optimizer's ``state_dict``, the step and the last finished epoch.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from kftrain import storage
from kftrain.data.dataset import DatasetInfo, load_split
from kftrain.trainers import checkpoint

log = logging.getLogger("kftrain.trainer")

STATE_FILE = "state.pt"


def train_split(dataset_uri: str, info: DatasetInfo, rank: int, world_size: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """This replica's training rows, and whether they are its own shards.

    When the train shards divide evenly among the replicas each reads only its own files (True);
    otherwise every replica reads them all (False) and :func:`train_loader` samples its part.
    """
    sharded = world_size > 1 and len(info.shards["train"]) % world_size == 0
    x, y = load_split(
        dataset_uri,
        "train",
        shard_index=rank if sharded else None,
        num_shards=world_size if sharded else None,
    )
    return x, y, sharded


def train_loader(
    x: np.ndarray, y: np.ndarray, batch: int, rank: int, world_size: int, seed: int, sharded: bool
) -> DataLoader:
    """Shuffled batches of this replica's rows: a DistributedSampler's part unless it holds its own shards."""
    data = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    if world_size > 1 and not sharded:
        sampler: DistributedSampler[Any] = DistributedSampler(
            data, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
        )
        return DataLoader(data, batch_size=batch, sampler=sampler)
    gen = torch.Generator().manual_seed(seed + rank)
    return DataLoader(data, batch_size=batch, shuffle=True, generator=gen)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """The share of rows ``model`` classifies right (NaN when there are none); leaves it in training mode."""
    if len(y) == 0:
        return float("nan")
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    model.train()
    return float((pred == y).mean())


def save_checkpoint(root: str, step: int, epoch: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Publish ``ckpt-<step>`` under ``root``; ``epoch`` is the last finished one (a resume starts after it)."""
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "epoch": epoch}, buf)
    uri = checkpoint.checkpoint_uri(root, step)
    with storage.ArtifactWriter(uri, metadata={"step": step, "epoch": epoch}) as w:
        w.write_bytes(STATE_FILE, buf.getvalue())
    log.info("checkpoint complete at step %d: %s", step, uri)


def load_checkpoint(uri: str) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint` in the complete checkpoint at ``uri``."""
    storage.require_complete(uri)
    return torch.load(io.BytesIO(storage.read_bytes(storage.join(uri, STATE_FILE))), weights_only=True)


def restore_latest(root: str, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, int]:
    """Load the newest complete checkpoint under ``root`` into ``model`` and ``opt``.

    Returns the step and the epoch to resume at: (0, 0) when there is no checkpoint (or ``root`` is empty).
    """
    found = checkpoint.latest_checkpoint(root)
    if found is None:
        return 0, 0
    state = load_checkpoint(found[1])
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    step, start_epoch = int(state["step"]), int(state["epoch"]) + 1
    log.info("resumed from checkpoint %s at step %d (epoch %d)", found[1], step, start_epoch)
    return step, start_epoch

"""Reference PyTorch trainer: DDP over gloo (CPU) or NCCL (GPU), run unchanged by the local backend
and by the training operator.

It reads only what the operator gives a replica (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``; or ``LOCAL_RANK`` too under torchrun) and URIs: the prepared dataset, a checkpoint
root and the model output. Only rank 0 writes checkpoints and the model; every write is atomic, and
a restarted job resumes from the newest complete checkpoint.

    python -m kftrain.trainers.torch_ddp --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from kftrain import checkpoint, storage
from kftrain.data.prep import load_split, read_info
from kftrain.trainers.common import print_summary, setup_logging, trainer_parser
from kftrain.trainers.torch_model import MLP, MLPConfig

log = logging.getLogger("kftrain.trainer")

MODEL_FILE = "model.pt"
MODEL_INFO = "model.json"


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def init_distributed(backend: str | None = None) -> DistContext:
    """Join the process group described by the operator's env; a single process when it is absent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and backend != "gloo"
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group(backend=backend or ("nccl" if use_cuda else "gloo"), init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(
        __doc__,
        replica="process",
        model_writer="rank 0",
        epochs=20,
        lr=0.05,
        lr_help="learning rate, scaled by the world size",
        threads_help="torch intra-op threads per process",
    )
    p.add_argument("--checkpoint-every-steps", type=int, default=0)
    p.add_argument("--checkpoint-every-seconds", type=float, default=0.0)
    p.add_argument("--checkpoint-every-epochs", type=int, default=1)
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default: nccl on GPU, else gloo")
    return p.parse_args(argv)


def _loader(x: np.ndarray, y: np.ndarray, batch: int, ctx: DistContext, seed: int, sharded: bool) -> DataLoader:
    data = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    if ctx.world_size > 1 and not sharded:
        sampler: DistributedSampler[Any] = DistributedSampler(
            data, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=seed
        )
        return DataLoader(data, batch_size=batch, sampler=sampler)
    gen = torch.Generator().manual_seed(seed + ctx.rank)
    return DataLoader(data, batch_size=batch, shuffle=True, generator=gen)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    if len(y) == 0:
        return float("nan")
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    model.train()
    return float((pred == y).mean())


def save_checkpoint(root: str, step: int, epoch: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "epoch": epoch}, buf)
    uri = checkpoint.checkpoint_uri(root, step)
    with storage.ArtifactWriter(uri, metadata={"step": step, "epoch": epoch}) as w:
        w.write_bytes("state.pt", buf.getvalue())
    log.info("checkpoint complete at step %d: %s", step, uri)


def load_checkpoint(uri: str) -> dict[str, Any]:
    storage.require_complete(uri)
    return torch.load(io.BytesIO(storage.read_bytes(storage.join(uri, "state.pt"))), weights_only=True)


def train(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    ctx = init_distributed(args.backend)
    torch.manual_seed(args.seed)
    info = read_info(args.dataset)
    shards = len(info.shards["train"])
    sharded = ctx.world_size > 1 and shards % ctx.world_size == 0
    x, y = load_split(
        args.dataset, "train", shard_index=ctx.rank if sharded else None, num_shards=ctx.world_size if sharded else None
    )
    xv, yv = load_split(args.dataset, "validation")
    config = MLPConfig(info.num_features, info.num_classes, tuple(int(h) for h in args.hidden.split(",")))
    model: nn.Module = MLP(config).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * ctx.world_size, momentum=0.9)
    step, start_epoch = 0, 0
    if args.checkpoint_dir:
        found = checkpoint.latest_checkpoint(args.checkpoint_dir)
        if found is not None:
            state = load_checkpoint(found[1])
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step, start_epoch = int(state["step"]), int(state["epoch"]) + 1
            log.info("resumed from checkpoint %s at step %d (epoch %d)", found[1], step, start_epoch)
    ddp = DistributedDataParallel(model) if ctx.world_size > 1 else model
    loader = _loader(x, y, args.batch_size, ctx, args.seed, sharded)
    policy = checkpoint.CheckpointPolicy(args.checkpoint_every_steps, args.checkpoint_every_seconds)
    loss_fn = nn.CrossEntropyLoss()
    log.info(
        "rank %d/%d: %d training rows (%s), %d epochs",
        ctx.rank,
        ctx.world_size,
        len(y),
        "own shards" if sharded else "sampled",
        args.epochs,
    )
    started = time.monotonic()
    val_acc = float("nan")
    for epoch in range(start_epoch, args.epochs):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(ddp(xb.to(ctx.device)), yb.to(ctx.device))
            loss.backward()
            opt.step()
            step += 1
            total += float(loss.detach())
            batches += 1
            checkpoint.maybe_inject_fault(step, ctx.rank)
            if args.checkpoint_dir and ctx.is_chief and policy.due(step):
                save_checkpoint(args.checkpoint_dir, step, epoch - 1 if batches < len(loader) else epoch, model, opt)
                policy.saved()
        if ctx.is_chief:
            val_acc = accuracy(model, xv, yv)
            log.info(
                "epoch %d/%d step %d loss %.4f val_accuracy %.4f",
                epoch + 1,
                args.epochs,
                step,
                total / max(batches, 1),
                val_acc,
            )
            every = args.checkpoint_every_epochs
            if args.checkpoint_dir and every and (epoch + 1) % every == 0:
                save_checkpoint(args.checkpoint_dir, step, epoch, model, opt)
                checkpoint.prune(args.checkpoint_dir, policy.keep)
    elapsed = time.monotonic() - started
    metrics = {"val_accuracy": val_acc, "steps": float(step), "train_seconds": elapsed}
    if ctx.is_chief:
        write_model(args.model_dir, model, config, info.classes, info.feature_names, metrics)
        log.info("model written to %s", args.model_dir)
    if ctx.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return metrics


def write_model(
    uri: str, model: nn.Module, config: MLPConfig, classes: list[int], features: list[str], metrics: dict[str, float]
) -> None:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    with storage.ArtifactWriter(uri, metadata={"framework": "pytorch"}) as w:
        w.write_bytes(MODEL_FILE, buf.getvalue())
        w.write_json(
            MODEL_INFO,
            {
                "framework": "pytorch",
                "architecture": "mlp",
                "config": config.to_json(),
                "classes": classes,
                "feature_names": features,
                "metrics": metrics,
            },
        )


def load_model(uri: str) -> tuple[nn.Module, dict[str, Any]]:
    storage.require_complete(uri)
    info = storage.read_json(storage.join(uri, MODEL_INFO))
    model = MLP(MLPConfig.from_json(info["config"]))
    state = torch.load(io.BytesIO(storage.read_bytes(storage.join(uri, MODEL_FILE))), weights_only=True)
    model.load_state_dict(state)
    model.eval()
    return model, info


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    metrics = train(parse_args(argv))
    print_summary({"rank": int(os.environ.get("RANK", "0"))}, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())

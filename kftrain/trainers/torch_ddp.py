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
import logging
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from kftrain.data.dataset import load_split, read_info
from kftrain.models.pytorch import MLP, MLPConfig, write_model
from kftrain.trainers import checkpoint, faults
from kftrain.trainers.common import print_summary, report_epoch, setup_logging, trainer_parser
from kftrain.trainers.torch_common import accuracy, restore_latest, save_checkpoint, train_loader, train_split

log = logging.getLogger("kftrain.trainer")


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
    p = trainer_parser(__doc__, epochs=20, lr=0.05)
    p.add_argument("--checkpoint-every-seconds", type=float, default=0.0)
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default: nccl on GPU, else gloo")
    return p.parse_args(argv)


def train(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    ctx = init_distributed(args.backend)
    torch.manual_seed(args.seed)
    info = read_info(args.dataset)
    x, y, sharded = train_split(args.dataset, info, ctx.rank, ctx.world_size)
    xv, yv = load_split(args.dataset, "validation")
    config = MLPConfig(info.num_features, info.num_classes, args.hidden)
    model: nn.Module = MLP(config).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * ctx.world_size, momentum=0.9)
    step, start_epoch = restore_latest(args.checkpoint_dir, model, opt)
    ddp = DistributedDataParallel(model) if ctx.world_size > 1 else model
    loader = train_loader(x, y, args.batch_size, ctx.rank, ctx.world_size, args.seed, sharded)
    policy = checkpoint.CheckpointPolicy(
        args.checkpoint_every_steps, args.checkpoint_every_seconds, keep=args.keep_checkpoints
    )
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
            faults.maybe_inject_fault(step, ctx.rank)
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
            report_epoch(epoch + 1, args.epochs, loss=total / max(batches, 1), val_accuracy=val_acc)
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


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    metrics = train(parse_args(argv))
    print_summary({"rank": int(os.environ.get("RANK", "0"))}, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reference PyTorch trainer: DDP over gloo (CPU) or NCCL (GPU), elastic under torchrun or not.

Reads only the operator's variables (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and
URIs. Each optimizer step trains on the same global batch at any world size (micro-batches of at most
``--batch-size``, gradients accumulated). Only rank 0 writes checkpoints (in the background) and the model; a
restarted or resized job resumes from the newest complete checkpoint's sample position.

    python -m kftrain.programs.torch_ddp --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from kftrain.data.dataset import load_split, read_info
from kftrain.models.pytorch import MLP, MLPConfig, write_model
from kftrain.programs import checkpoint, faults, torch_common
from kftrain.programs.common import global_batch_size, report_epoch, run, torch_main, trainer_parser
from kftrain.programs.global_batch import GlobalOrder, SamplerPosition, check_world_sizes, world_sizes_of_elastic_job

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
    p = trainer_parser(__doc__, epochs=20, lr=0.1)
    p.add_argument("--checkpoint-every-seconds", type=float, default=0.0)
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default: nccl on GPU, else gloo")
    torch_common.add_torch_flags(p)
    return p.parse_args(argv)


def _agreed(ctx: DistContext, value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    if ctx.world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    ctx = init_distributed(args.backend)
    torch.manual_seed(args.seed)
    info = read_info(args.dataset)
    if args.global_batch_size and (sizes := world_sizes_of_elastic_job(dict(os.environ))) is not None:
        check_world_sizes(args.global_batch_size, sizes)  # before any step, not at the first resize
    plan = torch_common.batch_plan(args, ctx.world_size)
    x, y = load_split(args.dataset, "train")
    xv, yv = load_split(args.dataset, "validation")
    order = GlobalOrder(len(y), global_batch_size(args, ctx.world_size), args.seed)
    config = MLPConfig(info.num_features, info.num_classes, args.hidden)
    model: nn.Module = MLP(config).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Every rank resumes from the checkpoint rank 0 chose (a newer one may appear while they look).
    step, position = torch_common.restore(_agreed(ctx, torch_common.latest_uri(args.checkpoint_dir)), model, opt)
    torch_common.set_lr(opt, args.lr)
    ddp = DistributedDataParallel(model) if ctx.world_size > 1 else None
    forward: nn.Module = ddp or model
    no_sync = ddp.no_sync if ddp is not None else None
    xt, yt = torch.from_numpy(x).to(ctx.device), torch.from_numpy(y).to(ctx.device)
    policy = checkpoint.CheckpointPolicy(
        args.checkpoint_every_steps, args.checkpoint_every_seconds, keep=args.keep_checkpoints
    )
    saver = checkpoint.Checkpointer(
        args.checkpoint_dir, keep=args.keep_checkpoints, max_in_flight=args.checkpoints_in_flight
    )
    loss_fn = nn.CrossEntropyLoss()
    log.info(
        "rank %d/%d: %d training rows, %d global batches per epoch, %d epochs",
        ctx.rank,
        ctx.world_size,
        len(y),
        order.steps_per_epoch,
        args.epochs,
    )
    started = time.monotonic()
    val_acc = float("nan")
    saved_step = step
    with saver:
        for epoch in range(position.epoch, args.epochs):
            total, batches = 0.0, 0
            for b in torch_common.epoch_batches(order, position, epoch):
                faults.hold(step, ctx.rank)
                opt.zero_grad()
                total += torch_common.accumulate(
                    forward,
                    loss_fn,
                    xt,
                    yt,
                    order.micro_batches(epoch, b, plan, ctx.rank),
                    no_sync,
                    seeds=order.micro_batch_seeds(epoch, b, plan, ctx.rank),
                )
                opt.step()
                step += 1
                batches += 1
                position = order.normalize(SamplerPosition(epoch, b + 1))
                if args.log_samples:
                    torch_common.log_samples(step, SamplerPosition(epoch, b), b, ctx.rank, ctx.world_size,
                                order.process_rows(epoch, b, ctx.rank, ctx.world_size))  # fmt: skip
                faults.maybe_inject_fault(step, ctx.rank)
                if args.checkpoint_dir and ctx.is_chief and policy.due(step):
                    torch_common.save_checkpoint(saver, step, position, model, opt)
                    policy.saved()
                    saved_step = step
            if ctx.is_chief:
                val_acc = torch_common.accuracy(model, xv, yv)
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
                if args.checkpoint_dir and every and (epoch + 1) % every == 0 and saved_step != step:
                    torch_common.save_checkpoint(saver, step, SamplerPosition(epoch + 1, 0), model, opt)
                    saved_step = step
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
    return torch_main(lambda: train(parse_args(argv)))


if __name__ == "__main__":
    run(main)

"""Horovod PyTorch trainer: one process per MPI rank (``mpirun -n N python -m kftrain.trainers.horovod_torch``),
as an MPIJob's Launcher starts it, or ``horovodrun``.

It mirrors :mod:`kftrain.trainers.torch_ddp` with Horovod in place of DDP (what the two share is in
:mod:`kftrain.trainers.torch_common`): gradients are averaged by ``hvd.DistributedOptimizer``, rank 0's
initial (or restored) weights and optimizer state reach every rank by ``broadcast_parameters`` /
``broadcast_optimizer_state``, the learning rate is scaled by ``hvd.size()``. Only rank 0 writes
checkpoints (every ``--checkpoint-every-steps`` steps and every epoch) and the model, in the same format
as the DDP trainer (:func:`kftrain.models.pytorch.write_model`), so evaluation and export work unchanged.
A restarted job resumes from the newest complete checkpoint.

    mpirun -n 2 python -m kftrain.trainers.horovod_torch --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from kftrain.data.dataset import load_split, read_info
from kftrain.models.pytorch import MLP, MLPConfig, write_model
from kftrain.trainers import checkpoint, faults
from kftrain.trainers.common import print_summary, report_epoch, setup_logging, trainer_parser
from kftrain.trainers.torch_common import accuracy, restore_latest, save_checkpoint, train_loader, train_split

log = logging.getLogger("kftrain.trainer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(__doc__, epochs=20, lr=0.05)
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16 for the allreduce")
    return p.parse_args(argv)


def train(args: argparse.Namespace) -> dict[str, float]:
    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    info = read_info(args.dataset)
    x, y, sharded = train_split(args.dataset, info, rank, size)
    xv, yv = load_split(args.dataset, "validation")
    config = MLPConfig(info.num_features, info.num_classes, args.hidden)
    model: nn.Module = MLP(config)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)

    step, start_epoch = restore_latest(args.checkpoint_dir, model, opt) if rank == 0 else (0, 0)
    # Rank 0's weights, optimizer state and position (fresh or restored) become every rank's.
    step, start_epoch = hvd.broadcast_object((step, start_epoch), root_rank=0, name="resume_position")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    dopt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression)

    loader = train_loader(x, y, args.batch_size, rank, size, args.seed, sharded)
    # Every rank must take the same number of steps (each step is an allreduce): the fewest batches any rank has.
    batches_per_epoch = int(hvd.allreduce(torch.tensor(len(loader)), op=hvd.Min, name="batches_per_epoch").item())
    policy = checkpoint.CheckpointPolicy(args.checkpoint_every_steps, 0.0, keep=args.keep_checkpoints)
    loss_fn = nn.CrossEntropyLoss()
    log.info(
        "rank %d/%d: %d training rows (%s), %d batches per epoch, %d epochs, lr %.4g",
        rank,
        size,
        len(y),
        "own shards" if sharded else "sampled",
        batches_per_epoch,
        args.epochs,
        args.lr * size,
    )
    started = time.monotonic()
    val_acc = float("nan")
    for epoch in range(start_epoch, args.epochs):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for xb, yb in loader:
            if batches >= batches_per_epoch:
                break
            dopt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            dopt.step()
            step += 1
            batches += 1
            faults.maybe_inject_fault(step, rank)
            total += float(loss.detach())
            if args.checkpoint_dir and rank == 0 and policy.due(step):
                # A mid-epoch checkpoint resumes at the start of this epoch.
                done_epoch = epoch - 1 if batches < batches_per_epoch else epoch
                save_checkpoint(args.checkpoint_dir, step, done_epoch, model, dopt)
                policy.saved()
                log.info("checkpoint at step %d", step)
        mean_loss = float(hvd.allreduce(torch.tensor(total / max(batches, 1)), name="epoch_loss").item())
        if rank == 0:
            val_acc = accuracy(model, xv, yv)
            log.info(
                "epoch %d/%d step %d loss %.4f val_accuracy %.4f",
                epoch + 1,
                args.epochs,
                step,
                mean_loss,
                val_acc,
            )
            report_epoch(epoch + 1, args.epochs, loss=mean_loss, val_accuracy=val_acc)
            every = args.checkpoint_every_epochs
            if args.checkpoint_dir and every and (epoch + 1) % every == 0:
                save_checkpoint(args.checkpoint_dir, step, epoch, model, dopt)
            if args.checkpoint_dir:
                checkpoint.prune(args.checkpoint_dir, policy.keep)
    elapsed = time.monotonic() - started
    metrics = {"val_accuracy": val_acc, "steps": float(step), "train_seconds": elapsed, "ranks": float(size)}
    if rank == 0:
        write_model(args.model_dir, model, config, info.classes, info.feature_names, metrics)
        log.info("model written to %s", args.model_dir)
    hvd.join()  # no rank exits while another still needs it
    return metrics


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    metrics = train(parse_args(argv))
    import horovod.torch as hvd

    print_summary({"rank": hvd.rank()}, metrics)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A DDP training script of your own that keeps a constant global batch when an elastic job changes size.

Plain PyTorch, no kftrain import: run it under torchrun (an elastic PyTorchJob's replicas do, with the
operator's PET_* variables). At every (re)start it reads the world size torchrun gives it and derives

* each process's share of the global batch (``global_batch / world_size`` rows) and how many micro-batches of
  at most ``--micro-batch`` rows it computes them in, accumulating gradients (``no_sync`` for all but the
  last, so DDP averages once per optimizer step);
* the rows of every optimizer step from one permutation per epoch, seeded by (seed, epoch) only, in
  global-batch chunks: step ``b`` of epoch ``e`` trains on the same rows whatever the world size;
* where to go on from: the checkpoint holds the step, the epoch and the global batches of it already done,
  so a resume at another size continues with exactly the next global batch (no row skipped or repeated).

The learning rate belongs to the global batch and is never scaled by the world size. Choose a global batch
that every world size the job can take divides (minReplicas..maxReplicas times the processes per replica).

    torchrun --nproc_per_node=2 examples/elastic/ddp_global_batch.py --global-batch-size 24 \\
        --micro-batch 4 --epochs 3 --checkpoint-dir /tmp/ckpt

kftrain.programs.global_batch (plan_batch, GlobalOrder, SamplerPosition) does the same arithmetic, for those
who would rather import it; this file shows that nothing in it needs kftrain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def say(line: str) -> None:
    """One write per line, flushed: the processes share torchrun's stdout, and a line written in parts (print
    writes its text, then its newline, when Python is unbuffered) interleaves with another process's."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batch_plan(global_batch: int, world_size: int, max_micro_batch: int) -> tuple[int, int]:
    """(micro-batch, accumulation): the fewest equal micro-batches of at most ``max_micro_batch`` rows."""
    if global_batch % world_size:
        raise SystemExit(f"--global-batch-size {global_batch} cannot be split among {world_size} processes")
    share = global_batch // world_size
    accumulation = next(a for a in range(1, share + 1) if share % a == 0 and share // a <= max(1, max_micro_batch))
    return share // accumulation, accumulation


def step_rows(num_rows: int, global_batch: int, seed: int, epoch: int, batch: int) -> torch.Tensor:
    """The rows of optimizer step ``batch`` of ``epoch``: the same for every process and every world size."""
    perm = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return perm[batch * global_batch : (batch + 1) * global_batch]


def data(num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stand-in for your dataset: any indexable rows work (the order above picks them by index)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(num_rows, 16, generator=g)
    return x, (x[:, :4].sum(dim=1) > 0).long()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--micro-batch", type=int, default=32, help="the most rows one forward pass takes")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1, help="the global batch's learning rate, never scaled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=240)
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--stop-after-step", type=int, default=0, help="drill: end after this step (0: never)")
    args = p.parse_args()

    dist.init_process_group("gloo")  # "nccl" on GPUs; torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    micro, accumulation = batch_plan(args.global_batch_size, world, args.micro_batch)
    x, y = data(args.rows)
    torch.manual_seed(args.seed)  # the same initial weights on every process
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    ckpt = args.checkpoint_dir / "checkpoint.pt"
    step, epoch, done = 0, 0, 0
    if ckpt.exists():  # every process reads the same file; a shared volume or object store on a cluster
        state = torch.load(ckpt, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, epoch, done = state["step"], state["epoch"], state["batches_done"]
    steps_per_epoch = args.rows // args.global_batch_size
    say(
        f"rank {rank}/{world}: global batch {args.global_batch_size} = {world} x {accumulation} micro-batch(es) "
        f"of {micro}; lr {args.lr}; from step {step} (epoch {epoch}, {done} batches done)"
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    share = args.global_batch_size // world
    while epoch < args.epochs:
        for batch in range(done, steps_per_epoch):
            rows = step_rows(args.rows, args.global_batch_size, args.seed, epoch, batch)[rank * share :][:share]
            for i in range(accumulation):
                part = rows[i * micro : (i + 1) * micro]
                last = i == accumulation - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    # Mean over the micro-batch, / accumulation: the mean over this process's share; DDP then
                    # averages the shares, giving the mean over the global batch at any world size.
                    (loss_fn(model(x[part]), y[part]) / accumulation).backward()
            opt.step()
            opt.zero_grad()
            step += 1
            say(f"step {step} epoch {epoch} batch {batch} rank {rank} rows {','.join(map(str, rows.tolist()))}")
            if rank == 0:  # save where the next step starts; write then rename, so a reader never sees half
                args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
                nxt = (epoch, batch + 1) if batch + 1 < steps_per_epoch else (epoch + 1, 0)
                state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}
                torch.save({**state, "epoch": nxt[0], "batches_done": nxt[1]}, ckpt.with_suffix(".tmp"))
                os.replace(ckpt.with_suffix(".tmp"), ckpt)
            dist.barrier()  # the checkpoint is complete before any process goes on (or stops)
            if step == args.stop_after_step:
                dist.destroy_process_group()
                return
        epoch, done = epoch + 1, 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Horovod PyTorch trainer: one process per rank under ``mpirun`` (an MPIJob's Launcher) or elastic ``horovodrun``.

:mod:`kftrain.programs.torch_ddp` with Horovod in place of DDP (shared code: :mod:`kftrain.programs.torch_common`):
the same constant global batch, sample order and model format. Elastic (``HOROVOD_ELASTIC=1``): a
``hvd.elastic.TorchState`` committed with each checkpoint and epoch; on a lost worker the survivors restore it and
re-plan for the new size; a new worker joins at the next step boundary, synchronized from rank 0.

    mpirun -n 2 python -m kftrain.programs.horovod_torch --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from typing import Any

import torch
from torch import nn

from kftrain.data.dataset import load_split, read_info
from kftrain.models.pytorch import MLP, MLPConfig, write_model
from kftrain.programs import checkpoint, faults, torch_common
from kftrain.programs.common import global_batch_size, horovod_main, report_epoch, run, trainer_parser
from kftrain.programs.global_batch import GlobalOrder, SamplerPosition

log = logging.getLogger("kftrain.trainer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(__doc__, epochs=20, lr=0.1)
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16 for the allreduce")
    torch_common.add_torch_flags(p)
    return p.parse_args(argv)


def elastic() -> bool:
    return os.environ.get("HOROVOD_ELASTIC") == "1"


def train(args: argparse.Namespace) -> dict[str, float]:
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    info = read_info(args.dataset)
    x, y = load_split(args.dataset, "train")
    xv, yv = load_split(args.dataset, "validation")
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    config = MLPConfig(info.num_features, info.num_classes, args.hidden)
    model: nn.Module = MLP(config)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step, position = (
        torch_common.restore(torch_common.latest_uri(args.checkpoint_dir), model, opt)
        if hvd.rank() == 0
        else (0, SamplerPosition())
    )
    torch_common.set_lr(opt, args.lr)
    state = _state(hvd, model, opt, step, position, global_batch_size(args, hvd.size()))
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    policy = checkpoint.CheckpointPolicy(args.checkpoint_every_steps, 0.0, keep=args.keep_checkpoints)
    saver = checkpoint.Checkpointer(
        args.checkpoint_dir, keep=args.keep_checkpoints, max_in_flight=args.checkpoints_in_flight
    )
    loss_fn = nn.CrossEntropyLoss()
    saved: set[int] = {step}  # steps rank 0 has checkpointed

    def commit() -> None:
        if elastic():
            state.commit()  # also raises HostsUpdatedInterrupt when workers were added or removed
            log.info("rank %d committed state at step %d", hvd.rank(), state.step)

    def epochs(state: Any) -> float:
        """Train from ``state`` to the last epoch: the body horovod's elastic run restarts after a resize."""
        rank, size = hvd.rank(), hvd.size()
        plan = torch_common.batch_plan(args, size, state.global_batch)
        order = GlobalOrder(len(y), state.global_batch, args.seed)
        start = SamplerPosition(state.epoch, state.batches_done)
        log.info(
            "rank %d/%d: %d training rows, %d global batches per epoch, %d epochs; at step %d (epoch %d, %d "
            "global batches of it done)",
            rank, size, len(y), order.steps_per_epoch, args.epochs, state.step, start.epoch, start.batches_done,
        )  # fmt: skip
        val_acc = float("nan")
        for epoch in range(start.epoch, args.epochs):
            total, batches = 0.0, 0
            for b in torch_common.epoch_batches(order, start, epoch):
                faults.hold(state.step, rank, stop=state.hosts_changed.is_set)
                if elastic():
                    state.check_host_updates()
                opt.zero_grad()
                total += torch_common.accumulate(
                    model,
                    loss_fn,
                    xt,
                    yt,
                    order.micro_batches(epoch, b, plan, rank),
                    seeds=order.micro_batch_seeds(epoch, b, plan, rank),
                )
                _allreduce_gradients(hvd, model, compression)
                opt.step()
                state.step += 1
                batches += 1
                done = order.normalize(SamplerPosition(epoch, b + 1))
                state.epoch, state.batches_done = done.epoch, done.batches_done
                if args.log_samples:
                    torch_common.log_samples(state.step, SamplerPosition(epoch, b), b, rank, size,
                                order.process_rows(epoch, b, rank, size))  # fmt: skip
                faults.maybe_inject_fault(state.step, rank)
                if policy.due(state.step):
                    if args.checkpoint_dir and rank == 0:
                        torch_common.save_checkpoint(saver, state.step, done, model, opt)
                        saved.add(state.step)
                    policy.saved()
                    commit()
            mean_loss = float(hvd.allreduce(torch.tensor(total / max(batches, 1)), name="epoch_loss").item())
            if rank == 0:
                val_acc = torch_common.accuracy(model, xv, yv)
                log.info(
                    "epoch %d/%d step %d loss %.4f val_accuracy %.4f", epoch + 1, args.epochs, state.step,
                    mean_loss, val_acc,
                )  # fmt: skip
                report_epoch(epoch + 1, args.epochs, loss=mean_loss, val_accuracy=val_acc)
                every = args.checkpoint_every_epochs
                if args.checkpoint_dir and every and (epoch + 1) % every == 0 and state.step not in saved:
                    torch_common.save_checkpoint(saver, state.step, SamplerPosition(epoch + 1, 0), model, opt)
                    saved.add(state.step)
            commit()
        return val_acc

    started = time.monotonic()
    with saver:
        if elastic():
            val_acc = hvd.elastic.run(epochs)(state)
        else:
            state.sync()  # rank 0's weights, optimizer state and position (fresh or restored) become every rank's
            val_acc = epochs(state)
    elapsed = time.monotonic() - started
    metrics = {
        "val_accuracy": val_acc,
        "steps": float(state.step),
        "train_seconds": elapsed,
        "ranks": float(hvd.size()),
    }
    if hvd.rank() == 0:
        write_model(args.model_dir, model, config, info.classes, info.feature_names, metrics)
        log.info("model written to %s", args.model_dir)
    if not elastic():
        hvd.join()  # no rank exits while another still needs it
    return metrics


def _state(hvd: Any, model: nn.Module, opt: torch.optim.Optimizer, step: int, position: SamplerPosition,
           global_batch: int) -> Any:  # fmt: skip
    """The training state horovod synchronizes from rank 0 (and, elastic, commits and restores), which also
    notes when horovodrun announced a change of hosts, so that a rank holding (a drill) goes on to meet it."""

    class State(hvd.elastic.TorchState):
        def __init__(self) -> None:
            super().__init__(
                model=model, optimizer=opt, step=step, epoch=position.epoch, batches_done=position.batches_done,
                global_batch=global_batch,
            )  # fmt: skip
            self.hosts_changed = threading.Event()
            self.register_reset_callbacks([self.hosts_changed.clear])

        def on_hosts_updated(self, timestamp: float, update_res: Any) -> None:
            super().on_hosts_updated(timestamp, update_res)
            self.hosts_changed.set()

    return State()


def _allreduce_gradients(hvd: Any, model: nn.Module, compression: Any) -> None:
    """Every rank's accumulated gradients replaced by their average across ranks, in one grouped allreduce."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    packed = [compression.compress(g) for g in grads]
    reduced = hvd.grouped_allreduce([t for t, _ in packed], op=hvd.Average, name="gradients")
    for grad, r, (_, ctx) in zip(grads, reduced, packed, strict=True):
        grad.copy_(compression.decompress(r, ctx))


def main(argv: list[str] | None = None) -> int:
    return horovod_main(lambda: train(parse_args(argv)), "horovod.torch")


if __name__ == "__main__":
    run(main)

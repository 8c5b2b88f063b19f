"""What every trainer program shares: the flags the launch steps pass, logging, the closing summary line.

The flags (``--dataset``, ``--model-dir``, ``--checkpoint-dir``, ``--epochs``, ``--global-batch-size``,
``--batch-size``, ``--lr``, ``--seed``...) are defined once, so the four programs agree. ``--global-batch-size`` is
one optimizer step's rows over all processes, the same at every world size; ``--batch-size`` then only bounds one
micro-batch (without it, the global batch is ``--batch-size`` x the processes). ``--lr`` is never scaled.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from kftrain import metrics
from kftrain.errors import KftrainError, fail_step
from kftrain.redaction import log_redacted


def trainer_parser(
    doc: str | None, *, epochs: int, lr: float, checkpoint_every_steps: int = 0, checkpoint_every_epochs: int | None = 1
) -> argparse.ArgumentParser:
    """A parser with the flags every trainer takes, with this trainer's defaults.

    ``checkpoint_every_epochs`` None leaves out ``--checkpoint-every-epochs``, for programs that checkpoint by
    steps only.
    """
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="URI of the prepared dataset")
    p.add_argument(
        "--model-dir",
        required=True,
        type=_output_uri,
        help="URI the final model is written to (by one process only); refused at start when it holds "
        "files that are not a previous model's",
    )
    p.add_argument("--checkpoint-dir", default="", help="URI of checkpoints; a restarted job resumes from the newest")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument(
        "--global-batch-size",
        type=_non_negative,
        default=0,
        help="rows per optimizer step across all processes, constant when an elastic job resizes "
        "(wins over --batch-size; 0: --batch-size x the processes)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=32,
        help="rows each process computes at once: its batch, or with --global-batch-size its largest micro-batch",
    )
    p.add_argument("--lr", type=float, default=lr, help="learning rate of a step over the global batch (not scaled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of each process")
    p.add_argument("--hidden", type=_widths, default=(128, 64), help="hidden layer widths, comma-separated")
    p.add_argument("--checkpoint-every-steps", type=int, default=checkpoint_every_steps, help="0: not by steps")
    if checkpoint_every_epochs is not None:
        p.add_argument("--checkpoint-every-epochs", type=int, default=checkpoint_every_epochs, help="0: not by epochs")
    p.add_argument("--keep-checkpoints", type=int, default=3, help="how many of the newest checkpoints to keep")
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def global_batch_size(args: argparse.Namespace, world_size: int) -> int:
    """The rows of one optimizer step across all processes: ``--global-batch-size``, else ``--batch-size`` x the
    processes."""
    return int(args.global_batch_size) or int(args.batch_size) * world_size


def _output_uri(uri: str) -> str:
    """An output the model can be published to, checked before training rather than after it."""
    from kftrain import storage

    try:
        storage.check_output(uri)
    except storage.StorageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return uri


def _widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one positive width")
    return widths


def trainer_flags(
    *,
    epochs: int = 0,
    global_batch_size: int = 0,
    batch_size: int = 0,
    lr: float = 0.0,
    seed: int = -1,
    checkpoint_every_steps: int = 0,
    extra: list[Any] | None = None,
) -> list[str]:
    """The command line that sets these of :func:`trainer_parser`'s flags; a zero (a negative seed) sets none.

    Values that travelled as pipeline parameters may be floats (``20.0``); whole ones are written as ints.
    """
    wanted = {
        "--epochs": epochs,
        "--global-batch-size": global_batch_size,
        "--batch-size": batch_size,
        "--lr": lr,
        "--seed": seed if seed >= 0 else None,
        "--checkpoint-every-steps": checkpoint_every_steps,
    }
    flags: list[str] = []
    for flag, value in wanted.items():
        if value is None or (flag != "--seed" and not value):
            continue
        flags += [flag, str(int(value)) if float(value).is_integer() and flag != "--lr" else str(value)]
    return flags + [str(a) for a in extra or []]


def run(main: Callable[[], int]) -> NoReturn:
    """A training program's entry (``run(main)`` under ``__main__``): an error the user caused (a ``KftrainError``:
    a flag that does not fit the data, a dataset or model that cannot be read) ends it as one ``ERROR:`` line with
    exit code 2, which the ExitCode restart policy does not retry (:mod:`kftrain.job.kinds.restarts`), not as a
    traceback in every replica's log."""
    try:
        code = main()
    except KftrainError as exc:
        fail_step(str(exc), exit_code=2)
    sys.exit(code)


def setup_logging() -> None:
    log_redacted(logging.INFO, "%(asctime)s %(levelname)s %(message)s", sys.stdout)


def print_summary(identity: dict[str, Any], metrics: dict[str, float]) -> None:
    """One JSON line per process with its final metrics (NaN becomes null: JSON has no NaN)."""
    summary = {k: (None if v != v else v) for k, v in metrics.items()}
    # One write: under mpirun the ranks share the launcher's output, and unbuffered print() would write the
    # line and its newline separately, letting another rank's text land in between.
    sys.stdout.write(json.dumps({**identity, **summary}) + "\n")
    sys.stdout.flush()


_totals_said: set[int] = set()


def torch_main(train: Callable[[], dict[str, float]]) -> int:
    """A torchrun trainer's ``main``: logging set up, ``train`` run, then the summary line with the rank torchrun
    (or the operator) gives this process (``RANK``, 0 alone)."""
    setup_logging()
    metrics = train()
    print_summary({"rank": int(os.environ.get("RANK", "0"))}, metrics)
    return 0


def horovod_main(train: Callable[[], dict[str, float]], hvd_module: str) -> int:
    """A Horovod trainer's ``main``: logging set up, ``train`` run, then the summary line with this process's rank
    and Horovod shut down. ``hvd_module``: the trainer's Horovod module (``horovod.torch``, ...), imported once
    training is done.
    """
    setup_logging()
    metrics = train()
    hvd = importlib.import_module(hvd_module)
    print_summary({"rank": hvd.rank()}, metrics)
    hvd.shutdown()
    return 0


def report_epoch(epoch: int, epochs: int, **values: float) -> None:
    """Report a finished epoch (1-based) and its values through the metrics contract (:mod:`kftrain.metrics`);
    the number of epochs is said with the first report."""
    if epochs not in _totals_said:
        _totals_said.add(epochs)
        metrics.report_total(epoch=epochs)
    metrics.report(epoch=epoch, **values)


def keras_reporter(keras: Any, epochs: int) -> Any:
    """A Keras callback that reports every epoch's logs (loss, accuracy, val_...) through :func:`report_epoch`."""

    class MetricsReporter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            report_epoch(epoch + 1, epochs, **{k: float(v) for k, v in (logs or {}).items()})

    return MetricsReporter()

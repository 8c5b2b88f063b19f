"""Horovod TensorFlow/Keras trainer: one process per rank under ``mpirun``, or elastic under ``horovodrun``.

Keras 2 (``tf_keras``; Horovod 0.28.1 predates Keras 3): ``hvd.DistributedOptimizer`` averages gradients,
rank 0's variables are broadcast, metrics averaged. Each rank's batch is its share of a constant global batch, at
the global batch's learning rate. Elastic (``HOROVOD_ELASTIC=1``): a ``hvd.elastic.KerasState`` committed every
``--checkpoint-every-steps`` and each epoch is restored after a rank is lost. Only rank 0 writes checkpoints
(``ckpt-<step>``) and the model (SavedModel with ``model.json``, :mod:`kftrain.models.tensorflow`).

    mpirun -n 2 python -m kftrain.programs.horovod_tf --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

from kftrain.programs import keras_env  # noqa: F401  # sets TF_USE_LEGACY_KERAS before TensorFlow is imported

# isort: split
import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kftrain import storage
from kftrain.data.dataset import DatasetInfo, load_split, read_info
from kftrain.models import tensorflow as tf_models
from kftrain.programs import checkpoint
from kftrain.programs.common import global_batch_size, horovod_main, keras_reporter, run, trainer_parser
from kftrain.programs.global_batch import plan_batch

log = logging.getLogger("kftrain.trainer")

CKPT_PREFIX = "ckpt"
CKPT_STATE = "state.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(__doc__, epochs=20, lr=0.1, checkpoint_every_epochs=None)
    return p.parse_args(argv)


def save_checkpoint(root: str, step: int, epoch: int, ckpt: Any) -> None:
    """``ckpt`` (a tf.train.Checkpoint) written locally, then published as one complete ``ckpt-<step>``."""
    staging = Path(tempfile.mkdtemp(prefix="kftrain-hvd-ckpt-"))
    try:
        ckpt.write(str(staging / CKPT_PREFIX))
        with storage.ArtifactWriter(
            checkpoint.checkpoint_uri(root, step), metadata={"step": step, "epoch": epoch}
        ) as w:
            for path in sorted(p for p in staging.iterdir() if p.is_file()):
                w.write_bytes(path.name, path.read_bytes())
            w.write_json(CKPT_STATE, {"step": step, "epoch": epoch})
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def restore_checkpoint(uri: str, ckpt: Any, staging: Path) -> dict[str, int]:
    """Restore ``ckpt`` from the checkpoint at ``uri``, copied into ``staging`` first.

    ``staging`` must outlive training: optimizer slots are restored from it when they are first created.
    """
    storage.require_complete(uri)
    for name in storage.list_files(uri):
        base = name.rstrip("/").rsplit("/", 1)[-1]
        if base.startswith(CKPT_PREFIX):
            (staging / base).write_bytes(storage.read_bytes(storage.join(uri, base)))
    ckpt.read(str(staging / CKPT_PREFIX)).expect_partial()
    state: dict[str, int] = storage.read_json(storage.join(uri, CKPT_STATE))
    return state


def _rank_data(dataset: str, rank: int, size: int, shards: int) -> tuple[np.ndarray, np.ndarray]:
    if size > 1 and shards % size == 0:
        return load_split(dataset, "train", shard_index=rank, num_shards=size)
    x, y = load_split(dataset, "train")
    return x[rank::size], y[rank::size]


def train(args: argparse.Namespace) -> dict[str, float]:
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf
    import tf_keras as keras

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(args.threads, 2))
    keras.utils.set_random_seed(args.seed)  # the same initial weights everywhere; rank 0's are broadcast anyway
    info = read_info(args.dataset)
    xv, yv = load_split(args.dataset, "validation")
    hidden = args.hidden
    global_batch = global_batch_size(args, hvd.size())  # fixed for the run, whatever the size becomes
    model = tf_models.build_model(info.num_features, info.num_classes, hidden, dropout=0.0)
    # Legacy optimizer: Horovod 0.28.1's DistributedOptimizer targets the Keras 2 optimizer API. The learning
    # rate is the global batch's: not scaled by the ranks.
    # hvd.DistributedOptimizer builds a new optimizer from this one's config: checkpoint and count steps with it.
    opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(learning_rate=args.lr, momentum=0.9))
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    # Optimizer slots are restored lazily, when first created: the restored files must outlive training.
    with tempfile.TemporaryDirectory(prefix="kftrain-hvd-restore-") as restored:
        initial_epoch = 0
        # Every rank restores (so every rank's optimizer slots get the same names); rank 0's values are then
        # broadcast anyway.
        if args.checkpoint_dir:
            found = checkpoint.latest_checkpoint(args.checkpoint_dir)
            if found is not None:
                state = restore_checkpoint(found[1], ckpt, Path(restored))
                initial_epoch = int(state["epoch"]) + 1
                log.info(
                    "resumed from checkpoint %s at step %d (epoch %d)", found[1], int(state["step"]), initial_epoch
                )
        initial_epoch = int(hvd_tf.broadcast_object(initial_epoch, root_rank=0, name="initial_epoch"))
        model.compile(
            optimizer=opt,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )

        def fit(epoch: int, extra_callbacks: list[Any], global_batch: int) -> Any:
            """``model.fit`` from ``epoch`` at the current size: each rank's share of the global batch per step."""
            rank, size = hvd.rank(), hvd.size()
            per_rank = plan_batch(global_batch, size).per_process
            log.info("world size %d: global batch %d = %d rank(s) x %d; lr %g", size, global_batch, size, per_rank,
                     args.lr)  # fmt: skip
            x, y = _rank_data(args.dataset, rank, size, len(info.shards["train"]))
            # Every rank takes the same number of steps per epoch (each step is an allreduce).
            steps_per_epoch = max(1, info.rows["train"] // global_batch)
            data = (
                tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(len(y), seed=args.seed + rank, reshuffle_each_iteration=True)
                .repeat()
                .batch(per_rank)
            )
            callbacks: list[Any] = [*extra_callbacks, hvd.callbacks.MetricAverageCallback()]
            for callback in callbacks:
                # Horovod 0.28.1 gives its Keras callbacks `from keras import backend`, which is Keras 3 when it is
                # installed, while the model and optimizer are Keras 2 (tf_keras); give them Keras 2's backend.
                callback.backend = keras.backend
            if rank == 0 and args.checkpoint_dir:
                callbacks.append(_checkpoint_callback(keras, args, ckpt, opt, steps_per_epoch))
            if rank == 0:  # after MetricAverageCallback: the averaged values, said once for all ranks
                callbacks.append(keras_reporter(keras, args.epochs))
            log.info("rank %d/%d: %d training rows, %d epochs x %d steps from epoch %d", rank, size, len(y),
                     args.epochs, steps_per_epoch, epoch)  # fmt: skip
            return model.fit(
                data,
                epochs=args.epochs,
                initial_epoch=epoch,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                verbose=2 if rank == 0 else 0,
            )

        started = time.monotonic()
        if elastic():
            # Model, optimizer and epoch are committed in memory every --checkpoint-every-steps steps (or every
            # epoch); a lost rank makes the others restore the last commit and go on at the new size.
            every = args.checkpoint_every_steps or None
            state = hvd.elastic.KerasState(model, batch=0, epoch=initial_epoch, global_batch=global_batch)

            @hvd.elastic.run
            def fit_elastic(state: Any) -> Any:
                commit = [hvd.elastic.CommitStateCallback(state, batches_per_commit=every or 10**9)]
                commit += [hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state)]
                return fit(state.epoch, commit, state.global_batch)

            history = fit_elastic(state)
        else:
            history = fit(initial_epoch, [hvd.callbacks.BroadcastGlobalVariablesCallback(0)], global_batch)
        elapsed = time.monotonic() - started
        rank, size = hvd.rank(), hvd.size()
        losses = [float(v) for v in history.history.get("loss", [])]
        step = int(opt.iterations.numpy())
        metrics = {
            "steps": float(step),
            "train_seconds": elapsed,
            "ranks": float(size),
            "final_loss": losses[-1] if losses else float("nan"),
            "val_accuracy": float("nan"),
        }
        if rank == 0:
            logits = model.predict(xv, verbose=0) if len(yv) else np.zeros((0, info.num_classes))
            metrics["val_accuracy"] = float((logits.argmax(axis=1) == yv).mean()) if len(yv) else float("nan")
            log.info("trained to step %d in %.1fs, val_accuracy %.4f", step, elapsed, metrics["val_accuracy"])
            _publish(args, model, info, hidden, metrics)
        if not elastic():
            hvd_tf.join()
        return metrics


def elastic() -> bool:
    """Run by horovodrun's elastic mode (``--min-np``/``--max-np``/``--host-discovery-script``)."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


def _checkpoint_callback(keras: Any, args: argparse.Namespace, ckpt: Any, opt: Any, steps_per_epoch: int) -> Any:
    policy = checkpoint.CheckpointPolicy(args.checkpoint_every_steps, 0.0, keep=args.keep_checkpoints)

    class Checkpointer(keras.callbacks.Callback):
        epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = int(opt.iterations.numpy())
            if policy.due(step) and batch + 1 < steps_per_epoch:  # the epoch's last step is saved below
                save_checkpoint(args.checkpoint_dir, step, self.epoch - 1, ckpt)  # resumes at this epoch's start
                policy.saved()
                log.info("checkpoint at step %d", step)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            save_checkpoint(args.checkpoint_dir, int(opt.iterations.numpy()), epoch, ckpt)
            checkpoint.prune(args.checkpoint_dir, policy.keep)

    return Checkpointer()


def _publish(
    args: argparse.Namespace, model: Any, info: DatasetInfo, hidden: tuple[int, ...], metrics: dict[str, float]
) -> None:
    staging = Path(tempfile.mkdtemp(prefix="kftrain-hvd-tf-model-"))
    try:
        plain = tf_models.build_model(info.num_features, info.num_classes, hidden, dropout=0.0)
        plain.set_weights(model.get_weights())  # without Horovod's optimizer wrapper
        tf_models.save_savedmodel(plain, staging / "model")
        tf_models.publish_model(
            args.model_dir, staging / "model", tf_models.model_json(info, hidden, "horovod", metrics)
        )
        log.info("model written to %s", args.model_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return horovod_main(lambda: train(parse_args(argv)), "horovod.tensorflow")


if __name__ == "__main__":
    run(main)

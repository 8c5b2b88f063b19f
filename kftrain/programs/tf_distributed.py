"""Reference TensorFlow trainer: Keras 2 (``tf_keras``) ``model.fit`` under the strategy TF_CONFIG implies.

No ``TF_CONFIG``: one process. Workers (and a chief): ``MultiWorkerMirroredStrategy``. With ``ps``:
``ParameterServerStrategy``, the chief coordinating, workers and servers blocking in a ``tf.distribute.Server``. An
``evaluator`` evaluates each new checkpoint until the chief writes ``_TRAINING_DONE.json``. ``BackupAndRestore``
every ``--checkpoint-every-steps`` resumes a restarted job; only the chief writes the model (SavedModel +
``model.json``), other workers save into a temporary folder, as multi-worker saving asks. ``TF_USE_LEGACY_KERAS=1``
is set first by :mod:`kftrain.programs.keras_env` (Keras 3's ``fit`` fails under MultiWorkerMirroredStrategy).

    python -m kftrain.programs.tf_distributed --dataset URI --model-dir URI [--checkpoint-dir URI]
"""

from __future__ import annotations

from kftrain.programs import keras_env  # noqa: F401  # sets TF_USE_LEGACY_KERAS before TensorFlow is imported

# isort: split
import argparse
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kftrain import storage
from kftrain.data.dataset import DatasetInfo, load_split, read_info
from kftrain.models import tensorflow as tf_models
from kftrain.programs import faults
from kftrain.programs.common import global_batch_size, keras_reporter, print_summary, run, setup_logging, trainer_parser

log = logging.getLogger("kftrain.trainer")

DONE_MARKER = "_TRAINING_DONE.json"
TF_CHECKPOINT_INDEX = "checkpoint"  # the file naming the newest checkpoint in a folder
SINGLE, MWMS, PS = "single", "multi_worker_mirrored", "parameter_server"


@dataclass
class Role:
    """This process's place in the TFJob, from TF_CONFIG."""

    task_type: str | None  # None: no TF_CONFIG
    task_index: int
    cluster: dict[str, Any]

    @classmethod
    def from_env(cls) -> Role:
        raw = os.environ.get("TF_CONFIG", "")
        if not raw.strip():
            return cls(None, 0, {})
        config = json.loads(raw)
        task = config.get("task", {})
        return cls(task.get("type"), int(task.get("index", 0)), config.get("cluster", {}))

    @property
    def mode(self) -> str:
        if self.task_type is None:
            return SINGLE
        return PS if self.cluster.get("ps") else MWMS

    @property
    def is_chief(self) -> bool:
        if self.task_type is None or self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    @property
    def label(self) -> str:
        return "single" if self.task_type is None else f"{self.task_type}-{self.task_index}"

    @property
    def num_workers(self) -> int:
        """Processes that compute gradients: workers, plus the chief under MultiWorkerMirrored."""
        workers = len(self.cluster.get("worker", []))
        if self.mode == MWMS:
            workers += len(self.cluster.get("chief", []))
        return max(workers, 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(__doc__, epochs=15, lr=0.003, checkpoint_every_steps=50, checkpoint_every_epochs=None)
    p.add_argument("--eval-poll-seconds", type=float, default=1.0, help="evaluator: checkpoint polling interval")
    p.add_argument("--eval-timeout-seconds", type=float, default=0.0, help="evaluator: give up after (0: never)")
    return p.parse_args(argv)


# --- checkpoints ------------------------------------------------------------------------------


class CheckpointDir:
    """A local folder for TensorFlow's checkpoint files, mirrored to a remote URI by the chief.

    TensorFlow's file system has no s3://; a local URI is used as is, an object-store URI gets a
    local folder that is filled from the URI at start and uploaded after training.
    """

    def __init__(self, uri: str, is_chief: bool) -> None:
        self.uri = uri
        self.remote = "://" in uri and not uri.startswith(("file://", "local://"))
        self.is_chief = is_chief
        if not self.remote:
            self.path = storage.local_path(uri)
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            self.path = Path(tempfile.mkdtemp(prefix="kftrain-tf-ckpt-"))
            try:
                if storage.exists(uri):
                    storage.download(uri, self.path)
            except BaseException:
                self.close()
                raise

    def sync(self) -> None:
        """Mirror the local folder at the URI, in an order that keeps the URI resumable at every moment: the
        checkpoint's files, then TensorFlow's ``checkpoint`` index that names it, then the files of the
        checkpoints it no longer keeps (Keras keeps one; without this the URI kept every one ever saved)."""
        if not (self.remote and self.is_chief):
            return
        files = sorted(
            storage.list_files(str(self.path)), key=lambda rel: (rel.rsplit("/", 1)[-1] == TF_CHECKPOINT_INDEX, rel)
        )
        if not files:
            return
        for rel in files:
            storage.upload(self.path / rel, storage.join(self.uri, rel))
        keep = {*files, DONE_MARKER}
        stale = [rel for rel in storage.list_files(self.uri) if rel not in keep]
        if stale:
            fs, root = storage.filesystem(self.uri)
            fs.rm([f"{root.rstrip('/')}/{rel}" for rel in stale])

    def close(self) -> None:
        if self.remote:
            shutil.rmtree(self.path, ignore_errors=True)


def _done_uri(checkpoint_uri: str) -> str:
    return storage.join(checkpoint_uri, DONE_MARKER)


def _remove(uri: str) -> None:
    fs, path = storage.filesystem(uri)
    fs.rm(path)


# --- strategies -------------------------------------------------------------------------------


def cluster_resolver(role: Role) -> Any:
    """The cluster without the evaluator: it runs no server, and a coordinator waiting for it hangs forever."""
    import tensorflow as tf

    cluster = {k: v for k, v in role.cluster.items() if k != "evaluator" and v}
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=role.task_type, task_id=role.task_index, rpc_layer="grpc"
    )


def make_strategy(role: Role) -> Any:
    import tensorflow as tf

    if role.mode == SINGLE:
        return tf.distribute.get_strategy()
    resolver = cluster_resolver(role)
    if role.mode == MWMS:
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    return tf.distribute.ParameterServerStrategy(resolver)


def run_server(role: Role) -> int:
    """A ParameterServerStrategy worker or parameter server: serve until stopped."""
    import tensorflow as tf

    resolver = cluster_resolver(role)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    log.info("%s: serving at %s until the job ends", role.label, server.target)
    server.join()
    return 0


# --- training ---------------------------------------------------------------------------------


class _ResumeLogger:
    """Keras callback (built lazily, Keras is imported late): logs the step training starts from."""

    @staticmethod
    def make(label: str, steps_per_epoch: int) -> Any:
        import tf_keras as keras

        class ResumeLogger(keras.callbacks.Callback):
            def on_train_begin(self, logs: Any = None) -> None:
                step = int(self.model.optimizer.iterations.numpy())
                if step:
                    log.info("%s: resumed from checkpoint at step %d (epoch %d)", label, step, step // steps_per_epoch)
                else:
                    log.info("%s: no checkpoint, starting at step 0", label)

        return ResumeLogger()


def _fault_injector(rank: int) -> Any:
    """Keras callback for the fault-injection hook (``KFTRAIN_FAULT_AT_STEP``, see kftrain.programs.faults)."""
    import tf_keras as keras

    class FaultInjector(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            faults.maybe_inject_fault(int(self.model.optimizer.iterations.numpy()), rank)

    return FaultInjector()


def _sync_callback(ckpt: CheckpointDir, every: int, per_epoch: bool) -> Any:
    """Upload the checkpoint folder after each save (only does something for object-store URIs)."""
    import tf_keras as keras

    class Sync(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._steps = 0

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if per_epoch:
                ckpt.sync()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._steps += 1
            if self._steps % every == 0:
                ckpt.sync()

        def _implements_train_batch_hooks(self) -> bool:
            return not per_epoch

    return Sync()


def _train_dataset(x: np.ndarray, y: np.ndarray, global_batch: int, seed: int) -> Any:
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y), seed=seed).repeat().batch(global_batch)
    options = tf.data.Options()
    # Every worker builds the same shuffled stream; each takes its part of every global batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(2)


def _ps_dataset_creator(x: np.ndarray, y: np.ndarray, batch: int, seed: int) -> Any:
    import tensorflow as tf
    import tf_keras as keras

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(y), seed=seed).repeat().batch(batch).prefetch(2)

    return keras.utils.experimental.DatasetCreator(dataset_fn)


def _accuracy(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    if len(y) == 0:
        return float("nan")
    logits = model(x, training=False).numpy()
    return float((logits.argmax(axis=1) == y).mean())


def train(args: argparse.Namespace) -> dict[str, float]:
    import tensorflow as tf
    import tf_keras as keras

    role = Role.from_env()
    if role.mode != PS and args.threads:
        # Not under ParameterServerStrategy: its coordinator's remote ops deadlock with small thread pools.
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(args.threads, 2))
    log.info("%s: mode %s, TF %s, tf_keras %s", role.label, role.mode, tf.__version__, keras.__version__)
    if role.task_type in ("ps",) or (role.mode == PS and role.task_type == "worker"):
        run_server(role)
        return {}
    if role.task_type == "evaluator":
        return evaluate_checkpoints(args, role)
    keras.utils.set_random_seed(args.seed)
    info = read_info(args.dataset)
    x, y = load_split(args.dataset, "train")
    xv, yv = load_split(args.dataset, "validation")
    strategy = make_strategy(role)
    global_batch = global_batch_size(args, role.num_workers if role.mode == MWMS else 1)  # PS: one worker's step
    steps_per_data_epoch = max(1, math.ceil(len(y) / global_batch))
    total_steps = steps_per_data_epoch * args.epochs
    ckpt_uri = args.checkpoint_dir or ""
    ckpt = CheckpointDir(ckpt_uri, role.is_chief) if ckpt_uri else None
    if ckpt is not None and role.is_chief and storage.exists(_done_uri(ckpt_uri)):
        _remove(_done_uri(ckpt_uri))  # a restarted job: the evaluator must wait for this run's end
    every = max(1, args.checkpoint_every_steps)
    if role.mode == PS:
        # No batch-level callbacks with ParameterServerStrategy: one fit "epoch" = one checkpoint interval.
        steps_per_epoch, epochs = every, math.ceil(total_steps / every)
        data: Any = _ps_dataset_creator(x, y, global_batch, args.seed)
    else:
        steps_per_epoch, epochs = steps_per_data_epoch, args.epochs
        data = _train_dataset(x, y, global_batch, args.seed)
    with strategy.scope():
        model = tf_models.build_model(info.num_features, info.num_classes, args.hidden)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate=args.lr),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=1,
        )
    callbacks: list[Any] = []
    if ckpt is not None:
        save_freq: int | str = "epoch" if role.mode == PS else every
        callbacks.append(
            keras.callbacks.BackupAndRestore(backup_dir=str(ckpt.path), save_freq=save_freq, delete_checkpoint=False)
        )
        if ckpt.remote and role.is_chief:
            callbacks.append(_sync_callback(ckpt, every, per_epoch=role.mode == PS))
    callbacks.append(_ResumeLogger.make(role.label, steps_per_epoch))
    callbacks.append(keras_reporter(keras, epochs))
    if os.environ.get(faults.FAULT_AT_STEP) and role.mode != PS:  # PS strategy allows no batch callbacks
        callbacks.append(_fault_injector(role.task_index or 0))
    log.info(
        "%s: %d training rows, %d worker(s), global batch %d, %d epochs x %d steps (checkpoint every %d steps)",
        *(role.label, len(y), role.num_workers, global_batch, epochs, steps_per_epoch, every),
    )
    started = time.monotonic()
    history = model.fit(data, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=2)
    elapsed = time.monotonic() - started
    losses = [float(v) for v in history.history.get("loss", [])]
    step = int(model.optimizer.iterations.numpy())
    plain = tf_models.build_model(info.num_features, info.num_classes, args.hidden)
    plain.set_weights(model.get_weights())
    val_acc = _accuracy(plain, xv, yv)
    metrics = {
        "val_accuracy": val_acc,
        "steps": float(step),
        "train_seconds": elapsed,
        "first_loss": losses[0] if losses else float("nan"),
        "final_loss": losses[-1] if losses else float("nan"),
    }
    log.info("%s: trained to step %d in %.1fs, val_accuracy %.4f", role.label, step, elapsed, val_acc)
    save_model(args, role, model if role.mode == MWMS else plain, info, args.hidden, metrics)
    if ckpt is not None:
        ckpt.sync()
        if role.is_chief:
            with storage.open_uri(_done_uri(ckpt_uri), "wb") as handle:
                handle.write(json.dumps({"step": step, "val_accuracy": val_acc}).encode())
        ckpt.close()
    return metrics


def save_model(
    args: argparse.Namespace,
    role: Role,
    model: Any,
    info: DatasetInfo,
    hidden: tuple[int, ...],
    metrics: dict[str, float],
) -> None:
    """The chief publishes the SavedModel; other MultiWorkerMirrored workers save to a temp folder and delete it."""
    staging = Path(tempfile.mkdtemp(prefix="kftrain-tf-model-"))
    try:
        path = staging / "model" if role.is_chief else staging / f"workertemp_{role.task_index}" / "model"
        tf_models.save_savedmodel(model, path)
        if not role.is_chief:
            return  # the finally below deletes the temporary copy
        tf_models.publish_model(args.model_dir, path, tf_models.model_json(info, hidden, role.mode, metrics))
        log.info("%s: model written to %s", role.label, args.model_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- side-car evaluation ------------------------------------------------------------------------


def evaluate_checkpoints(args: argparse.Namespace, role: Role) -> dict[str, float]:
    """Evaluate every new checkpoint of the chief on the validation split; stop after the done marker."""
    import tensorflow as tf

    if not args.checkpoint_dir:
        log.info("%s: no checkpoint dir, nothing to evaluate", role.label)
        return {}
    info = read_info(args.dataset)
    xv, yv = load_split(args.dataset, "validation")
    model = tf_models.build_model(info.num_features, info.num_classes, args.hidden)
    started = time.monotonic()
    seen: str | None = None
    metrics: dict[str, float] = {}
    while True:
        done = storage.exists(_done_uri(args.checkpoint_dir))
        ckpt = _fetch(args.checkpoint_dir, final=done, label=role.label)
        if ckpt is not None:
            try:
                latest = tf.train.latest_checkpoint(str(ckpt.path / "chief"))
                if latest and latest != seen and _restore(model, latest, final=done, label=role.label):
                    acc = _accuracy(model, xv, yv)
                    seen = latest
                    metrics = {"val_accuracy": acc}
                    log.info("%s: checkpoint %s val_accuracy %.4f", role.label, Path(latest).name, acc)
            finally:
                ckpt.close()
        if done:
            log.info("%s: the chief is done; evaluator exits", role.label)
            return metrics
        if args.eval_timeout_seconds and time.monotonic() - started > args.eval_timeout_seconds:
            log.warning("%s: no done marker after %.0fs; evaluator exits", role.label, args.eval_timeout_seconds)
            return metrics
        time.sleep(args.eval_poll_seconds)


def _fetch(uri: str, final: bool, label: str) -> CheckpointDir | None:
    """The chief's checkpoint folder (an object store's: a fresh download); None when the chief removed a file
    of an older checkpoint while it was downloaded. Once the chief is done (``final``) an error is real."""
    try:
        return CheckpointDir(uri, is_chief=False)
    except (OSError, storage.StorageError) as error:
        if final:
            raise
        log.info("%s: the checkpoints changed while downloaded (%s); trying again", label, error)
        return None


def _restore(model: Any, checkpoint: str, final: bool, label: str) -> bool:
    """Load a checkpoint the chief named; False when its next save deleted it before it was read.

    The chief keeps one checkpoint (Keras's BackupAndRestore), so the one ``latest_checkpoint`` named
    can be gone a moment later. Once the chief is done (``final``) nothing replaces a checkpoint, so
    an error then is real.
    """
    import tensorflow as tf

    try:
        tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    except tf.errors.OpError as error:
        if final:
            raise
        log.info(
            "%s: checkpoint %s went away while read (%s); waiting for the next one",
            label,
            Path(checkpoint).name,
            type(error).__name__,
        )
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    from kftrain.programs.tf_config import ensure_tf_config

    ensure_tf_config()  # a Trainer v2 TrainJob gives none; a TFJob's own is kept
    setup_logging()
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # per-epoch INFO lines of tf.data/tf.distribute
    metrics = train(parse_args(argv))
    print_summary({"task": Role.from_env().label}, metrics)
    return 0


if __name__ == "__main__":
    run(main)

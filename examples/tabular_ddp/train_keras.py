"""A data scientist's own Keras training script, run as a TFJob by the train-evaluate-export pipeline.

It imports no kftrain: TensorFlow reads TF_CONFIG (set by the training operator in every replica) and
MultiWorkerMirroredStrategy trains on every worker; the prepared dataset is read with pyarrow from
$KFTRAIN_DATASET_URI; worker 0 writes a SavedModel (with its serving signature), model.json and metrics.jsonl to
$KFTRAIN_MODEL_URI, as the model contract says (kftrain/models/README.md). Keras 2 (tf_keras): Keras 3's
model.fit does not run under MultiWorkerMirroredStrategy.

    python train_keras.py [--epochs 40] [--lr 0.01] [--hidden 32]
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is Keras 2 (tf_keras), before TensorFlow loads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json
import shutil
import tempfile

import fsspec
import tensorflow as tf
from tabular_data import parser, read_split


def main() -> None:
    args = parser(__doc__, epochs=40).parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {"type": "worker", "index": 0})
    chief = task["type"] in ("chief", "master") or (task["type"] == "worker" and task["index"] == 0)
    root = os.environ["KFTRAIN_DATASET_URI"]
    with fsspec.open(f"{root}/dataset.json") as handle:
        info = json.load(handle)
    x, y = read_split(root, info, "train")
    xv, yv = read_split(root, info, "validation")
    classes = info["num_classes"]
    tf.keras.utils.set_random_seed(0)
    with strategy.scope():
        inputs = tf.keras.Input((x.shape[1],), name="features")
        norm = tf.keras.layers.Normalization(mean=x.mean(axis=0), variance=x.var(axis=0) + 1e-6)(inputs)
        hidden = tf.keras.layers.Dense(args.hidden, activation="relu")(norm)
        model = tf.keras.Model(inputs, tf.keras.layers.Dense(classes, name="logits")(hidden))
        model.compile(
            optimizer=tf.keras.optimizers.Adam(args.lr),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    # Every worker reads the whole (small) split; the strategy splits each global batch among the workers.
    workers = strategy.num_replicas_in_sync
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(args.batch_size * workers)
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=max(1, len(x) // (args.batch_size * workers)),
                        validation_data=(xv, yv), verbose=2)  # fmt: skip
    rows = [{"epoch": i + 1, **{k: float(v[i]) for k, v in history.history.items()}} for i in range(args.epochs)]
    # Every MultiWorkerMirrored worker must save (the save is collective); only worker 0 keeps its copy.
    local = tempfile.mkdtemp()
    model.save(local, save_format="tf", include_optimizer=False)
    if chief:
        description = {
            "format": "savedmodel",
            "task": "classification",
            "classes": info["classes"],
            "feature_names": info["feature_names"],
            "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, classes]}],
        }
        fs, path = fsspec.core.url_to_fs(os.environ["KFTRAIN_MODEL_URI"])
        fs.makedirs(path, exist_ok=True)
        fs.put(local.rstrip("/") + "/", path, recursive=True)
        with fs.open(f"{path}/model.json", "w") as handle:
            json.dump(description, handle, indent=2)
        with fs.open(f"{path}/metrics.jsonl", "w") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in rows))
        print(f"model written to {os.environ['KFTRAIN_MODEL_URI']}", flush=True)
    shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    main()

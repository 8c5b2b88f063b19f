"""A stand-in training program for the pipeline tests that check wiring, not training: it writes a valid model in
a few seconds (most of it the framework's import), so that evaluation and export still run on a real model.

The contract it keeps and the flags it takes are in the comment below the imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

# It keeps the contract a real program keeps (kftrain/models/README.md, the metrics contract in kftrain/metrics):
# it reads the prepared dataset at ``$KFTRAIN_DATASET_URI`` (or ``--dataset``), reports its curve through
# ``KFTRAIN_METRICS`` lines, publishes one checkpoint under ``$KFTRAIN_CHECKPOINT_URI`` (the launcher of KFP
# before 2.17 downloads it with the model: a sibling key), and one process writes the model at
# ``$KFTRAIN_MODEL_URI`` (or ``--model-dir``) in this release's format for ``--framework``: a kftrain MLP
# (``model.pt`` + ``model.json``) for PyTorch, a SavedModel + ``model.json`` for TensorFlow. The model is a linear
# layer fitted in closed form (least squares on the one-hot labels of a classification dataset), so the digits
# pipelines' quality gate still passes on it. The other replicas import no framework and exit at once.
#
# Run by file path (``python testbed/programs/stub_trainer.py``): this folder holds only programs, named so that none
# shadows a module when it is the first entry of the program's path. It takes the flags of this release's programs
# (``--dataset``, ``--model-dir``, ``--checkpoint-dir``, ``--epochs``: the epochs it reports) and ignores the others,
# so it runs with the arguments the pipelines give the real one.


DATASET_ENV, MODEL_ENV, CHECKPOINT_ENV = "KFTRAIN_DATASET_URI", "KFTRAIN_MODEL_URI", "KFTRAIN_CHECKPOINT_URI"
FRAMEWORKS = ("pytorch", "tensorflow")
RIDGE = 1.0  # keeps the normal equations well conditioned (digits has constant-zero pixels) and the fit general


def writes_the_model(env: dict[str, str]) -> bool:
    """Whether this replica is the one that writes the model: a TFJob's chief (its worker 0 when it has no chief),
    rank 0 of a PyTorchJob, node 0 of a TrainJob; a replica none of these name (an MPI launcher) is alone."""
    if "TF_CONFIG" in env:
        config = json.loads(env["TF_CONFIG"])
        task, cluster = config.get("task", {}), config.get("cluster", {})
        first = "chief" if "chief" in cluster else "master" if "master" in cluster else "worker"
        return bool(task.get("type") == first and int(task.get("index", 0)) == 0)
    for name in ("RANK", "PET_NODE_RANK", "JOB_COMPLETION_INDEX"):
        if name in env:
            return env[name] == "0"
    return True


def fit(x: Any, y: Any, classes: int) -> tuple[Any, Any, float]:
    """The least-squares linear layer (weights ``[features, classes]``, bias ``[classes]``) of the one-hot labels
    ``y`` on ``x``, and its mean squared error on them (the loss reported)."""
    import numpy as np

    target = np.eye(classes)[y.astype(np.int64)]
    design = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    solved = np.linalg.solve(design.T @ design + RIDGE * np.eye(design.shape[1]), design.T @ target)
    loss = float(np.mean((design @ solved - target) ** 2))
    return solved[:-1].astype(np.float32), solved[-1].astype(np.float32), loss


def accuracy(x: Any, y: Any, weights: Any, bias: Any) -> float:
    import numpy as np

    return float(np.mean(np.argmax(x @ weights + bias, axis=1) == y)) if len(x) else 0.0


def write_checkpoint(root: str, epoch: int) -> None:
    """One checkpoint where the real programs put theirs (``ckpt-<step>``, published with its marker)."""
    from kftrain import storage
    from kftrain.programs.checkpoint import checkpoint_uri

    with storage.ArtifactWriter(checkpoint_uri(root, epoch)) as writer:
        writer.write_json("state.json", {"epoch": epoch, "stub": True})


def write_pytorch(uri: str, info: Any, weights: Any, bias: Any, metrics: dict[str, float]) -> None:
    import torch

    from kftrain.models.pytorch import MLP, MLPConfig, write_model

    config = MLPConfig(num_features=info.num_features, num_classes=weights.shape[1], hidden=(), dropout=0.0)
    model = MLP(config)
    with torch.no_grad():
        (layer,) = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        layer.weight.copy_(torch.from_numpy(weights.T.copy()))
        layer.bias.copy_(torch.from_numpy(bias))
    write_model(uri, model, config, info.classes, info.feature_names, metrics)


def write_tensorflow(uri: str, info: Any, weights: Any, bias: Any, metrics: dict[str, float]) -> None:
    from kftrain.models.tensorflow import build_model, model_json, publish_model, save_savedmodel

    model = build_model(info.num_features, weights.shape[1], hidden=(), dropout=0.0)
    model.set_weights([weights, bias])
    with tempfile.TemporaryDirectory() as folder:
        save_savedmodel(model, folder)
        publish_model(uri, folder, model_json(info, (), "stub", metrics))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=FRAMEWORKS, required=True, help="the format of the model written")
    parser.add_argument("--epochs", type=int, default=1, help="the epochs reported (one point, at the last)")
    parser.add_argument("--dataset", default=os.environ.get(DATASET_ENV, ""))
    parser.add_argument("--model-dir", default=os.environ.get(MODEL_ENV, ""))
    parser.add_argument("--checkpoint-dir", default=os.environ.get(CHECKPOINT_ENV, ""))
    args, _ignored = parser.parse_known_args(argv)
    env = dict(os.environ)
    if not writes_the_model(env):
        print("stub trainer: not the replica that writes the model", flush=True)
        return 0
    if not args.dataset or not args.model_dir:
        print(f"stub trainer: needs ${DATASET_ENV} and ${MODEL_ENV} (or --dataset, --model-dir)", file=sys.stderr)
        return 2

    from kftrain import metrics
    from kftrain.data.dataset import load_split, read_info

    info = read_info(args.dataset)
    if info.task != "classification":
        print(f"stub trainer: writes classifiers only; the dataset's task is {info.task}", file=sys.stderr)
        return 2
    weights, bias, loss = fit(*load_split(args.dataset, "train"), info.num_classes)
    point = {"loss": loss, "val_accuracy": accuracy(*load_split(args.dataset, "validation"), weights, bias)}
    metrics.report_total(epoch=args.epochs)
    metrics.report(epoch=args.epochs, **point)
    if args.checkpoint_dir:
        write_checkpoint(args.checkpoint_dir, args.epochs)
    write = write_pytorch if args.framework == "pytorch" else write_tensorflow
    write(args.model_dir, info, weights, bias, {"epoch": float(args.epochs), **point})
    print(f"stub trainer: wrote a linear {args.framework} model to {args.model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

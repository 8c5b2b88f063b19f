"""A data scientist's own PyTorch training script, run as a PyTorchJob by the train-evaluate-export pipeline.

It imports no kftrain: it reads what the training operator gives every replica (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT: DistributedDataParallel over gloo when there are several) and the URIs the launch step adds
($KFTRAIN_DATASET_URI, $KFTRAIN_MODEL_URI), reads the prepared dataset with pyarrow, and writes the model as the
model contract says (kftrain/models/README.md): TorchScript (or ONNX with --save-as onnx), model.json and the
training curves in metrics.jsonl. It handles classification and regression, whichever the dataset is.

    python train.py [--epochs 30] [--lr 0.01] [--hidden 32] [--save-as torchscript|onnx]
"""

import io
import json
import os

import fsspec
import numpy as np
import torch
import torch.distributed as dist
from tabular_data import parser, read_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    """Standardization (from the training data) baked in, so the saved model takes the raw features."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, hidden: int, outputs: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.from_numpy(mean))
        self.register_buffer("std", torch.from_numpy(std))
        self.body = nn.Sequential(nn.Linear(len(mean), hidden), nn.ReLU(), nn.Linear(hidden, outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body((x - self.mean) / self.std)


def save(model: Net, uri: str, info: dict, history: list[dict], save_as: str) -> None:
    """The model contract: the model file, model.json and metrics.jsonl, in the model folder at ``uri``."""
    model.eval()
    example = torch.zeros(1, len(info["feature_names"]))
    files = {}
    if save_as == "onnx":
        buf = io.BytesIO()
        torch.onnx.export(model, (example,), buf, dynamo=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})  # fmt: skip
        files["model.onnx"] = buf.getvalue()
    else:
        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(model), buf)
        files["model.pt"] = buf.getvalue()
    outputs = model(example).shape[1]
    description = {
        "format": save_as,
        "task": info["task"],
        "feature_names": info["feature_names"],
        "inputs": [{"name": "input", "dtype": "float32", "shape": [-1, len(info["feature_names"])]}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": [-1, outputs]}],
    }
    if info["task"] == "classification":
        description["classes"] = info["classes"]
    files["model.json"] = json.dumps(description, indent=2).encode()
    files["metrics.jsonl"] = "".join(json.dumps(row) + "\n" for row in history).encode()
    fs, path = fsspec.core.url_to_fs(uri)
    fs.makedirs(path, exist_ok=True)
    for name, data in files.items():
        with fs.open(f"{path}/{name}", "wb") as handle:
            handle.write(data)


def main() -> None:
    p = parser(__doc__, epochs=30)
    p.add_argument("--save-as", choices=["torchscript", "onnx"], default="torchscript")
    args = p.parse_args()

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")  # MASTER_ADDR and MASTER_PORT come from the operator
    torch.manual_seed(0)
    root = os.environ["KFTRAIN_DATASET_URI"]
    with fsspec.open(f"{root}/dataset.json") as handle:
        info = json.load(handle)
    regression = info["task"] == "regression"
    x, y = read_split(root, info, "train")
    xv, yv = read_split(root, info, "validation")
    target = torch.from_numpy(y.astype(np.float32) if regression else y.astype(np.int64))
    model = Net(x.mean(axis=0), x.std(axis=0) + 1e-6, args.hidden, 1 if regression else info["num_classes"])
    if regression:  # start the output at the target's scale
        with torch.no_grad():
            model.body[-1].bias.fill_(float(y.mean()))
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    data = TensorDataset(torch.from_numpy(x), target)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0) if world > 1 else None
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None)
    loss_fn = nn.MSELoss() if regression else nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    history = []
    for epoch in range(1, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            out = ddp(xb)
            loss = loss_fn(out[:, 0] if regression else out, yb)
            loss.backward()
            opt.step()
            total += float(loss) * len(xb)
        model.eval()
        with torch.no_grad():
            out = model(torch.from_numpy(xv))
        point = {"epoch": epoch, "loss": total / len(loader.sampler)}
        if regression:
            point["val_rmse"] = float(np.sqrt(np.mean((out[:, 0].numpy() - yv) ** 2)))
        else:
            point["val_loss"] = float(loss_fn(out, torch.from_numpy(yv.astype(np.int64))))
            point["val_accuracy"] = float((out.argmax(1).numpy() == yv).mean())
        history.append(point)
        if rank == 0:
            print(json.dumps(point), flush=True)
    if rank == 0:
        save(model, os.environ["KFTRAIN_MODEL_URI"], info, history, args.save_as)
        print(f"model written to {os.environ['KFTRAIN_MODEL_URI']}", flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

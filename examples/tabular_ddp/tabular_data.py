"""The command line and the reading of the prepared dataset, shared by train.py and train_keras.py (imported
from this folder, which Python puts first on the path when it runs either script)."""

import argparse

import fsspec
import numpy as np
import pyarrow.parquet as pq


def read_split(root: str, info: dict, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Features (float32, in feature_names order) and labels of one split of the prepared dataset."""
    xs, ys = [], []
    for rel in info["shards"][split]:
        with fsspec.open(f"{root}/{rel}", "rb") as handle:
            table = pq.read_table(handle)
        xs.append(np.column_stack([table[name].to_numpy() for name in info["feature_names"]]))
        ys.append(table["label"].to_numpy())
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


def parser(description: str | None, epochs: int) -> argparse.ArgumentParser:
    """The flags both programs take; ``epochs`` is the program's own default."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    return p

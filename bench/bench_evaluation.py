"""P12: evaluate_model's rows/s on a large test split beside a bare inference loop of the same runtime over the same
Parquet batches, and the peak RSS of each as the split grows.

    python bench/bench_evaluation.py [--rows 2000000] [--scales 1,4] [--features 32] [--classes 10]
                                     [--formats torchscript,onnx] [--repeat 3] [--workdir DIR] --json out.json

Setup (once per run, in --workdir): a synthetic table (float32 features, an integer class label) prepared with
``prepare_dataset`` so that its test split holds ``--rows`` × scale rows, for each scale; an MLP (features -> 64
-> 64 -> classes) saved with ``save_model`` as TorchScript and as ONNX.

Each measurement is its own subprocess, timed from before the model is loaded to the last batch; its peak RSS is
that of the same span (the peak is started over after the imports, which peak higher than some runs):

- ours: ``kftrain.steps.evaluate.evaluation.evaluate_model(model, dataset, "test")``: the split streamed in
  batches of ``BATCH_ROWS`` rows, every metric of a multi-class evaluation (confusion matrix, log loss, per-class
  scores);
- bare: the framework's own loop over the same shards: ``pq.ParquetFile(shard).iter_batches(BATCH_ROWS)``, the
  feature columns stacked, the model run (``torch.jit.load`` under ``no_grad`` / an ``onnxruntime``
  session), the accuracy counted.

Rounds interleave ours and bare at every scale and format, alternating which goes first. The accuracy of both
must agree (they score the same rows with the same model), or the run fails.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from child import run_child  # bench/child.py, beside this script

FORMATS = ("torchscript", "onnx")
SIDES = ("bare", "ours")
TEST_FRACTION = 0.8
HIDDEN = 64


def _maxrss_mb() -> float:
    """This process's peak RSS: VmHWM, which /proc/self/clear_refs starts over (getrusage's ru_maxrss also keeps
    the RSS of the parent this process was forked from, and is not started over)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _reset_peak_rss() -> bool:
    """Start the peak RSS over from the current RSS (Linux: /proc/self/clear_refs), so the peak is the measured
    run's, not an import's; False where that cannot be done (the peak is then the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --- setup ------------------------------------------------------------------------------------------------------


def make_dataset(folder: Path, test_rows: int, features: int, classes: int, seed: int = 0) -> dict[str, Any]:
    """A prepared dataset at ``folder`` whose test split holds at least ``test_rows`` rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kftrain.steps.prep import prepare_dataset

    total = int(test_rows / TEST_FRACTION) + 1
    source = folder.with_suffix(".source.parquet")
    rng = np.random.default_rng(seed)
    projection = rng.standard_normal((features, classes)).astype(np.float32)
    with pq.ParquetWriter(source, pa.schema([*(pa.field(f"f{i:02d}", pa.float32()) for i in range(features)),
                                             pa.field("label", pa.int64())])) as writer:  # fmt: skip
        for start in range(0, total, 500_000):
            n = min(500_000, total - start)
            x = rng.standard_normal((n, features), dtype=np.float32)
            # A label the features predict (with noise), so the model's accuracy is a real number to compare.
            y = np.argmax(x @ projection + rng.standard_normal((n, classes), dtype=np.float32), axis=1)
            writer.write_table(pa.table({**{f"f{i:02d}": x[:, i] for i in range(features)}, "label": y}))
    info = prepare_dataset(
        str(folder), source=str(source), test_fraction=TEST_FRACTION, validation_fraction=0.0, train_shards=1
    )
    source.unlink()
    if info.rows["test"] < test_rows:
        raise RuntimeError(f"{folder}: {info.rows['test']} test rows, wanted {test_rows}")
    return {"rows": info.rows["test"], "shards": len(info.shards["test"])}


def make_models(folder: Path, features: int, classes: int) -> dict[str, str]:
    """The same MLP saved as TorchScript and as ONNX: {format: model URI}."""
    import numpy as np
    import torch

    from kftrain.models import save_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, classes),
    )
    example = np.zeros((2, features), np.float32)
    out = {}
    for fmt in FORMATS:
        uri = str(folder / fmt)
        save_model(model, uri, example_input=example, classes=list(range(classes)), format=fmt)
        out[fmt] = uri
    return out


# --- one measurement (a subprocess) -----------------------------------------------------------------------------


def _model_file(model_uri: str) -> str:
    """The one model file save_model wrote (model.pt or model.onnx)."""
    (found,) = [p for p in Path(model_uri).iterdir() if p.suffix in (".pt", ".onnx")]
    return str(found)


def bare_loop(fmt: str, model_uri: str, dataset: str) -> tuple[int, int]:
    """(rows, correct) of the framework's own loop over the test shards."""
    import numpy as np
    import pyarrow.parquet as pq

    from kftrain.data.dataset import BATCH_ROWS

    info = json.loads(Path(dataset, "dataset.json").read_text())
    columns = [*info["feature_names"], "label"]
    if fmt == "torchscript":
        import torch

        model = torch.jit.load(_model_file(model_uri), map_location="cpu").eval()

        def predict(x: Any) -> Any:
            with torch.no_grad():
                return model(torch.from_numpy(x)).numpy()

    else:
        import onnxruntime

        session = onnxruntime.InferenceSession(_model_file(model_uri), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def predict(x: Any) -> Any:
            return session.run(None, {name: x})[0]

    rows = correct = 0
    features = len(columns) - 1
    for rel in info["shards"]["test"]:
        for batch in pq.ParquetFile(str(Path(dataset, rel))).iter_batches(batch_size=BATCH_ROWS, columns=columns):
            x = np.column_stack([batch.column(i).to_numpy() for i in range(features)])
            y = batch.column(features).to_numpy()
            correct += int((predict(x).argmax(axis=1) == y).sum())
            rows += len(y)
    return rows, correct


def worker(side: str, fmt: str, model_uri: str, dataset: str) -> dict[str, Any]:
    import numpy  # noqa: F401  # imports are not part of the measurement: both sides load the same modules
    import pyarrow.parquet  # noqa: F401

    import kftrain.steps.evaluate.evaluation as evaluation

    if fmt == "torchscript":
        import torch  # noqa: F401
    else:
        import onnxruntime  # noqa: F401
    base = _maxrss_mb()
    reset = _reset_peak_rss()
    started = time.perf_counter()
    if side == "ours":
        result = evaluation.evaluate_model(model_uri, dataset, "test")
        rows, accuracy = result.rows, result.metrics["accuracy"]
    else:
        rows, correct = bare_loop(fmt, model_uri, dataset)
        accuracy = correct / rows
    seconds = time.perf_counter() - started
    return {
        "rows": rows,
        "seconds": seconds,
        "accuracy": accuracy,
        "rss_mb": _maxrss_mb(),  # the run's peak (the process's where it could not be reset)
        "rss_base_mb": base,  # the peak of the imports before it
        "peak_of_run": reset,
    }


def run_worker(side: str, fmt: str, model_uri: str, dataset: str) -> dict[str, Any]:
    return run_child(
        [__file__, "--worker", side, "--format", fmt, "--model", model_uri, "--dataset", dataset],
        f"{side} {fmt} on {dataset}",
    )


# --- the benchmark ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="test rows at scale 1")
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where the datasets and models go (default: a temp folder)")
    parser.add_argument("--json")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--format", choices=FORMATS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.format, args.model, args.dataset)))
        return 0
    if not args.json:
        parser.error("--json is required")
    scales = [int(s) for s in args.scales.split(",")]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="kftrain-p12-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        datasets = {s: make_dataset(work / f"data-x{s}", args.rows * s, args.features, args.classes) for s in scales}
        models = make_models(work, args.features, args.classes)
        setup_s = time.perf_counter() - started
        runs = []
        for round_index in range(args.repeat):
            for scale in scales:
                for fmt in formats:
                    sides = SIDES if round_index % 2 == 0 else SIDES[::-1]
                    found = {}
                    for side in sides:
                        found[side] = run_worker(side, fmt, models[fmt], str(work / f"data-x{scale}"))
                        runs.append({"round": round_index, "scale": scale, "format": fmt, "side": side, **found[side]})
                    if found["ours"]["rows"] != found["bare"]["rows"] or (
                        abs(found["ours"]["accuracy"] - found["bare"]["accuracy"]) > 1e-9
                    ):
                        raise RuntimeError(f"ours and bare disagree at scale {scale}, {fmt}: {found}")
    Path(args.json).write_text(
        json.dumps(
            {
                "features": args.features,
                "classes": args.classes,
                "hidden": HIDDEN,
                "test_rows": {str(s): d["rows"] for s, d in datasets.items()},
                "shards": {str(s): d["shards"] for s, d in datasets.items()},
                "setup_s": setup_s,
                "runs": runs,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

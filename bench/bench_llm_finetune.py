"""P16: what the embedded default learns, and how fast: the tiny Llama fine-tuned on ``builtin:reverse``.

    python bench/bench_llm_finetune.py [--replicas 1,2] [--epochs 2] [--method full] [--workdir DIR] --json out.json

Setup: ``prepare_instructions(builtin:reverse)`` (2,160 train, 240 test rows). For each replica count, the
fine-tuning program runs under bare ``torchrun --nproc-per-node N`` (one thread per process when N > 1, else two:
two cores either way) with the same global batch; its own summary line gives the training seconds and tokens/s, and
``/usr/bin/time``-style peak RSS comes from ``resource.getrusage`` of the children. Exact match on the test split
(greedy, :class:`kftrain.llm.generate.GenerationSettings`' defaults) is measured for the base model (the folder's
``base/``) and the fine-tuned one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kftrain.llm import model_io
from kftrain.llm.evaluate import evaluate_language_model
from kftrain.llm.instructions import read_split
from kftrain.steps.prep_instructions import prepare_instructions


def train(dataset: str, out: Path, replicas: int, args: argparse.Namespace) -> dict[str, float]:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    command = [torchrun, "--standalone", f"--nproc-per-node={replicas}", "-m", "kftrain.programs.hf_finetune",
               "--dataset", dataset, "--model-dir", str(out), "--method", args.method, "--lr", str(args.lr),
               "--epochs", str(args.epochs), "--global-batch-size", "32", "--batch-size", "32",
               "--threads", str(max(1, 2 // replicas)), "--log-every-steps", "20"]  # fmt: skip
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.monotonic() - started
    if run.returncode:
        raise SystemExit(run.stdout[-3000:] + run.stderr[-3000:])
    summary = json.loads([line for line in run.stdout.splitlines() if line.startswith('{"rank": 0')][-1])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {**summary, "wall_seconds": wall, "peak_rss_mb_max_process": peak_mb}


def exact_match(model: object, tokenizer: object, examples: list) -> float:
    return evaluate_language_model(model, tokenizer, examples).metrics["exact_match"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", default="1,2")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--method", default="full", choices=model_io.METHODS)
    p.add_argument("--workdir", default="")
    p.add_argument("--json", required=True)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-llm-", dir=args.workdir or None) as work:
        dataset = str(Path(work) / "dataset")
        prepare_instructions(dataset, source="builtin:reverse")
        test = read_split(dataset, "test")
        rows = []
        for replicas in (int(r) for r in args.replicas.split(",")):
            out = Path(work) / f"model-{replicas}"
            figures = train(dataset, out, replicas, args)
            tuned, tokenizer, _ = model_io.load_finetuned(str(out))
            base, base_tokenizer = model_io.load_base(str(out))
            figures["exact_match_after"] = exact_match(tuned, tokenizer, test)
            figures["exact_match_before"] = exact_match(base, base_tokenizer, test)
            rows.append({"replicas": replicas, "method": args.method, "epochs": args.epochs, **figures})
            print(json.dumps(rows[-1]), flush=True)
    Path(args.json).write_text(json.dumps({"machine_cores": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

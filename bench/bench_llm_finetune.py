"""P16: what the embedded default learns, and how fast: the tiny Llama fine-tuned on ``builtin:reverse``.

    python bench/bench_llm_finetune.py [--replicas 1,2] [--epochs 2] [--method full] [--workdir DIR] --json out.json
    python bench/bench_llm_finetune.py --compare --repeat 3 [--replicas 1,2] --json out.json  # bench/run.py's P16

``--compare``: bare torchrun beside the launch step (bench/finetune_sides.py), interleaved, no exact match.

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
               "--dataset", dataset, "--model-dir", str(out), *flags(args, replicas)]  # fmt: skip
    started = time.monotonic()
    # torchrun's agent writes its torchelastic_* logs under the temporary folder: the run's own, removed with it.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(out.parent)}
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    if run.returncode:
        raise SystemExit(run.stdout[-3000:] + run.stderr[-3000:])
    summary = json.loads([line for line in run.stdout.splitlines() if line.startswith('{"rank": 0')][-1])
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {**summary, "wall_seconds": wall, "peak_rss_mb_max_process": peak_mb}


def compare(args: argparse.Namespace) -> int:
    """Bare torchrun and the launch step in turns, ``--repeat`` pairs per replica count, each run a process."""
    from finetune_sides import SIDES, run_side  # bench/finetune_sides.py, beside this script

    with tempfile.TemporaryDirectory(prefix="bench-llm-", dir=args.workdir or None) as work:
        dataset = str(Path(work) / "dataset")
        prepare_instructions(dataset, source="builtin:reverse")
        runs = []
        for replicas in (int(r) for r in args.replicas.split(",")):
            for attempt in range(args.repeat):
                for side in SIDES:
                    folder = Path(work) / f"{side}-{replicas}-{attempt}"
                    found = run_side(side, dataset, folder, replicas, flags(args, replicas))
                    runs.append({"side": side, "replicas": replicas, "attempt": attempt, **found})
                    print(json.dumps(runs[-1]), flush=True)
    Path(args.json).write_text(json.dumps({"machine_cores": os.cpu_count(), "runs": runs}, indent=2) + "\n")
    return 0


def flags(args: argparse.Namespace, replicas: int) -> list[str]:
    """The program's flags besides the URIs, the same on every side: two cores' threads in all."""
    return ["--method", args.method, "--lr", str(args.lr), "--epochs", str(args.epochs), "--global-batch-size", "32",
            "--batch-size", "32", "--threads", str(max(1, 2 // replicas)), "--log-every-steps", "20"]  # fmt: skip


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
    p.add_argument("--compare", action="store_true", help="bare torchrun beside the launch step, interleaved")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if args.compare:
        return compare(args)
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

"""P10 program: how much checkpointing stalls training, by checkpoint mode.

Trains a ~100M-parameter MLP on CPU (SGD with momentum, random data) and checkpoints it every ``--every``
steps to a local S3 server (moto, started here unless ``--endpoint`` is given) through the PyTorch trainers' own
path (:func:`kftrain.programs.torch_common.save_checkpoint` and :class:`kftrain.programs.checkpoint.Checkpointer`):

* ``none``: no checkpoints (the baseline);
* ``async``: snapshot in memory on the training thread, serialize and upload in the background (1 in flight);
* ``sync``: the same checkpoint, published before the step returns (``max_in_flight=0``), for reference.

Modes run interleaved, ``--repeat`` rounds. Each run's step time is its mean over the timed steps (a
checkpoint step included); the final wait for the last upload is reported apart ("drain"). Prints one line per
run, a summary, and ``P10 {json}`` with the medians and the ratios async ÷ none and sync ÷ none.

    python bench/programs/checkpoint_stall.py [--steps 60] [--every 20] [--repeat 1] [--json out.json]
        [--endpoint URL --bucket NAME]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/, for its local_s3.py
from local_s3 import start_moto, stop_moto

MODES = ("none", "async", "sync")
BUCKET = "p10-checkpoints"


def build(widths: list[int]) -> Any:
    import torch

    layers: list[Any] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def run(mode: str, model: Any, opt: Any, args: argparse.Namespace, root: str) -> dict[str, float]:
    import torch

    from kftrain.programs.checkpoint import Checkpointer
    from kftrain.programs.global_batch import SamplerPosition
    from kftrain.programs.torch_common import save_checkpoint

    x = torch.randn(args.batch, args.widths[0])
    y = torch.randint(0, args.widths[-1], (args.batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    saver = Checkpointer(root, keep=2, max_in_flight=1 if mode == "async" else 0)
    times: list[float] = []
    for step in range(1, args.warmup + args.steps + 1):
        started = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if mode != "none" and step > args.warmup and (step - args.warmup) % args.every == 0:
            save_checkpoint(saver, step, SamplerPosition(0, step), model, opt)
        if step > args.warmup:
            times.append(time.perf_counter() - started)
    drained = time.perf_counter()
    saver.wait()
    return {
        "step_s": statistics.fmean(times),
        "median_step_s": statistics.median(times),
        "max_step_s": max(times),
        "drain_s": time.perf_counter() - drained,
        "save_waited_s": saver.waited_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--every", type=int, default=20, help="checkpoint every this many steps")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--widths", type=lambda t: [int(w) for w in t.split(",")], default=[1024, 8192, 8192, 3072, 10])
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--repeat", type=int, default=1, help="rounds of every mode, interleaved")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--endpoint", help="an S3 endpoint to use instead of starting moto_server")
    p.add_argument("--bucket", default=BUCKET, help="the bucket to checkpoint to (created when missing)")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args(argv)

    proc = None
    endpoint = args.endpoint
    if not endpoint:
        proc, endpoint = start_moto()
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID=os.environ.get("AWS_ACCESS_KEY_ID", "bench"),
        AWS_SECRET_ACCESS_KEY=os.environ.get("AWS_SECRET_ACCESS_KEY", "bench"),
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        import boto3
        import torch

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=args.bucket)
        torch.manual_seed(0)
        torch.set_num_threads(args.threads)
        model = build(args.widths)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        params = sum(p.numel() for p in model.parameters())
        # What one checkpoint holds: the weights and the optimizer's momentum buffers (float32).
        checkpoint_mb = 2 * params * 4 / 1e6
        shape = "-".join(map(str, args.widths))
        print(
            f"MLP {shape}: {params / 1e6:.1f}M parameters, batch {args.batch}, {args.threads} threads; "
            f"checkpoint every {args.every} of {args.steps} steps to {endpoint}",
            flush=True,
        )
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for round_ in range(args.repeat):
            for mode in modes:
                result = run(mode, model, opt, args, f"s3://{args.bucket}/round-{round_}/{mode}")
                runs[mode].append(result)
                print(f"{mode:>5}: " + " ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)
    finally:
        stop_moto(proc)
    step = {m: statistics.median(r["step_s"] for r in rs) for m, rs in runs.items()}
    summary: dict[str, Any] = {
        "parameters": params,
        "checkpoint_mb": checkpoint_mb,
        "every": args.every,
        "steps": args.steps,
        "threads": args.threads,
        "step_s": step,
        "drain_s": {m: statistics.median(r["drain_s"] for r in rs) for m, rs in runs.items()},
        "save_waited_s": {m: statistics.median(r["save_waited_s"] for r in rs) for m, rs in runs.items()},
        "rounds": [{m: rs[i]["step_s"] for m, rs in runs.items()} for i in range(args.repeat)],
    }
    if "none" in step:
        summary["ratio"] = {m: step[m] / step["none"] for m in step if m != "none"}
        # Each round's ratio against the baseline run next to it (the spread a noisy machine gives).
        summary["round_ratios"] = {m: [r[m] / r["none"] for r in summary["rounds"]] for m in step if m != "none"}
    print("P10 " + json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmarks: each figure is a ratio against the bare baseline measured side by side in the same run.

    python bench/run.py [--only P1,P3] [--repeat 3] [--quick] [--out bench/results.md] [--keep-others]

The machine is shared and noisy, so every measurement is repeated (baseline and ours interleaved)
and min/median/max are reported; the verdict uses the median. Results go to bench/results.md
(with the machine's cores and the date) and are printed as a table.

P1 pipeline overhead, P2 launch latency, P3 DDP scaling, P4 object storage, P5 compile, P6 data prep at 1, 4 and
8 GiB of Parquet on disk (bench/bench_prep.py: rows/s beside pyarrow, peak RSS), P7 GPU throughput (where there
is a GPU), P8 image payload (bench/bench_images.py: each image's installed size, slimmed, beside unslimmed, and
its step's cold import; bench/bench_built_images.py: each image built for real, its size and build times), P9
launcher cost at scale (bench/bench_launcher.py: 50 launch steps against the fake API
server beside the Kubeflow training SDK's wait), P10 checkpoint stall, P11 what a step's pod downloads on KFP's
backend before its code runs, at each supported release (bench/bench_launch_download.py, through
testbed/kfp_backend: the launch step's dataset, evaluation's and export's model beside what the job left by it),
P12 evaluation at scale (bench/bench_evaluation.py: evaluate_model beside the runtime's bare loop, peak RSS at 1x
and 4x the split), P13 a Python function as a job (bench/bench_function_job.py: kftrain launch beside the Kubeflow
SDK's local process backend, and on 2 nodes x 2 processes), P14 P9's launch steps on the real API server
(bench/bench_launcher_controlplane.py: kube-apiserver and training-operator built from Go modules, requests from its
audit log, its CPU, beside the fake API server's count), P15 the real control plane itself
(bench/bench_controlplane.py: its warm and cold builds, the tests' fixture's start, memory, idle CPU and stop), P16
LLM fine-tuning through the launch step beside bare torchrun (bench/bench_llm_finetune.py --compare), P17
pod creation to Running on the real node (bench/bench_node_pods.py: 20 pods, p50/p99, beside Kubernetes' 5 s target).

Each benchmark is bracketed by a load calibration (bench/load.py): its note says how busy the machine was
before and after, and a row measured on a busy machine says so beside its verdict.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import load  # bench/load.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "bench" / "programs"
PY = sys.executable
BIN = Path(PY).parent


@dataclass(frozen=True)
class Goal:
    """A benchmark's goal, written once: its words in the table, and the test of the median ratio."""

    text: str
    met: Callable[[float], bool]


def at_least(ratio: float, *also: str) -> Goal:
    """The median ratio ≥ ``ratio``; ``also``: goals beside it, which the benchmark checks (``Result.also_missed``)."""
    return Goal(", ".join([f"≥ {ratio:.2f}", *also]), lambda r: r >= ratio)


def at_most(ratio: float, *also: str) -> Goal:
    return Goal(", ".join([f"≤ {ratio:.2f}", *also]), lambda r: r <= ratio)


REPORTED = Goal("report", lambda r: True)


@dataclass
class Result:
    key: str
    title: str
    goal: Goal
    ratios: list[float] = field(default_factory=list)
    ours: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    unit: str = "s"
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    busy: bool = False  # the load calibration around it saw another program hold part of the machine
    also_missed: bool = False  # a goal beside the ratio (peak RSS, every job ending) was missed

    def row(self) -> str:
        if self.skipped.startswith("not run"):
            return f"| {self.key} | {self.title} | — | — | — | {self.goal.text} | {self.skipped} |"
        if self.skipped:
            return f"| {self.key} | {self.title} | — | — | — | {self.goal.text} | skipped: {self.skipped} |"
        med = statistics.median(self.ratios)
        verdict = "met" if self.goal.met(med) and not self.also_missed else "**missed**"
        if self.busy:
            verdict += " (machine busy: see its load note)" if verdict == "met" else " (machine busy: rerun it quiet)"
        spread = f"{min(self.ratios):.3f} / {med:.3f} / {max(self.ratios):.3f}"
        ours = f"{statistics.median(self.ours):.3f} {self.unit}" if self.ours else "—"
        base = f"{statistics.median(self.baseline):.3f} {self.unit}" if self.baseline else "—"
        return f"| {self.key} | {self.title} | {ours} | {base} | {spread} | {self.goal.text} | {verdict} |"


def timed(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:6])}... failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return elapsed, proc.stdout + proc.stderr


# --- P1: pipeline overhead -----------------------------------------------------------------------


def p1_pipeline_overhead(repeat: int, quick: bool) -> Result:
    res = Result("P1", "full local pipeline ÷ the same 4 steps as bare scripts", at_most(1.10))
    epochs = 5 if quick else 20
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            ds, model, ckpt, exp = t / "ds", t / "model", t / "ckpt", t / "export"
            bare = 0.0
            prep = f"from kftrain.steps.prep import prepare_dataset; prepare_dataset({str(ds)!r})"
            bare += timed([PY, "-c", prep])[0]
            bare += timed(
                [
                    str(BIN / "torchrun"),
                    "--nproc_per_node=2",
                    "-m",
                    "kftrain.programs.torch_ddp",
                    "--dataset",
                    str(ds),
                    "--model-dir",
                    str(model),
                    "--checkpoint-dir",
                    str(ckpt),
                    "--epochs",
                    str(epochs),
                ]
            )[0]
            bare += timed(
                [
                    PY,
                    "-c",
                    "from kftrain.steps.evaluate import evaluate_model as e; "
                    f"r = e({str(model)!r}, {str(ds)!r}); assert r.metrics['accuracy'] > 0.5",
                ]
            )[0]
            bare += timed(
                [
                    PY,
                    "-c",
                    f"from kftrain.steps.export import export_model as e; e({str(model)!r}, {str(ds)!r}, {str(exp)!r})",
                ]
            )[0]
            ours, _ = timed(
                [
                    str(BIN / "kftrain"),
                    "run",
                    "pytorch-digits",
                    "--pipeline-root",
                    str(t / "runs"),
                    "--param",
                    f"epochs={epochs}",
                ]
            )
        res.ours.append(ours)
        res.baseline.append(bare)
        res.ratios.append(ours / bare)
    res.notes.append(f"{epochs} epochs; bare = prep, torchrun --nproc_per_node=2, evaluate, export as 4 processes")
    return res


# --- P2: launch latency --------------------------------------------------------------------------

JOB_4 = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: bench-first-step}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [python, {prog}]}}]}}}}
    Worker:
      replicas: 3
      restartPolicy: Never
      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [python, {prog}]}}]}}}}
"""


def p2_launch_latency(repeat: int, quick: bool) -> Result:
    res = Result("P2", "launch of a 4-replica PyTorchJob to its first step ÷ bare torchrun", at_most(1.10))
    prog = PROGRAMS / "first_step.py"
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.yaml"
        job.write_text(JOB_4.format(prog=prog))
        for _ in range(repeat):
            start = time.time()
            _, out = timed([str(BIN / "torchrun"), "--nproc_per_node=4", str(prog)])
            bare = _first_step(out) - start
            start = time.time()
            _, out = timed([str(BIN / "kftrain"), "launch", "-f", str(job), "--local"])
            ours = _first_step(out) - start
            res.ours.append(ours)
            res.baseline.append(bare)
            res.ratios.append(ours / bare)
    res.notes.append("time from command start to rank 0's first completed step (one DDP backward)")
    return res


def _first_step(output: str) -> float:
    match = re.search(r"FIRST_STEP (\d+\.\d+)", output)
    if not match:
        raise RuntimeError(f"no FIRST_STEP line in:\n{output[-2000:]}")
    return float(match.group(1))


# --- P3: DDP scaling -----------------------------------------------------------------------------

JOB_2 = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: bench-scaling}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [python, {prog}, {args}]}}]}}}}
    Worker:
      replicas: 1
      restartPolicy: Never
      template: {{spec: {{containers: [{{name: pytorch, image: x, command: [python, {prog}, {args}]}}]}}}}
"""


def _ddp_args(steps: str, batch: int) -> list[str]:
    return ["--steps", steps, "--warmup", "2", "--batch", str(batch)]


def _throughputs(output: str) -> list[float]:
    return [float(v) for v in re.findall(r"THROUGHPUT (\S+)", output)]


def _backward_ms(output: str) -> float:
    """Mean backward time per step over the ranks in ``output`` (the PHASES lines of ddp_throughput.py)."""
    values = [float(m.group(1)) for m in re.finditer(r"PHASES \S+ (\S+) \S+", output)]
    return statistics.mean(values)


P3_BATCH = 4096  # per process: the gradient allreduce (33 MB, fixed per step) is then ~2-3% of a step
P3_SMALL_BATCH = 1024  # the same model with a 4x larger communication share, reported as a diagnostic


def p3_scaling(repeat: int, quick: bool) -> Result:
    res = Result(
        "P3",
        "DDP samples/s, 2 workers × 1 thread ÷ (2 × 1 worker × 1 thread)",
        at_least(0.90),
        unit="samples/s",
    )
    prog = PROGRAMS / "ddp_throughput.py"
    steps = "3" if quick else "5"
    bare_ddp: list[float] = []
    concurrent: list[float] = []
    small_ratios: list[float] = []
    allreduce_ms: dict[int, list[float]] = {P3_BATCH: [], P3_SMALL_BATCH: []}
    step_ms: dict[int, list[float]] = {P3_BATCH: [], P3_SMALL_BATCH: []}
    with tempfile.TemporaryDirectory() as tmp:

        def launch(batch: int) -> str:
            job = Path(tmp) / f"job-{batch}.yaml"
            flow = ", ".join(f"'{a}'" for a in _ddp_args(steps, batch))
            job.write_text(JOB_2.format(prog=prog, args=flow))
            return timed([str(BIN / "kftrain"), "launch", "-f", str(job), "--local"])[1]

        for _ in range(repeat):
            for batch in (P3_BATCH, P3_SMALL_BATCH):
                _, single_out = timed([PY, str(prog), *_ddp_args(steps, batch)])
                single = _throughputs(single_out)[0]
                ddp_out = launch(batch)
                total = sum(_throughputs(ddp_out))
                allreduce_ms[batch].append(_backward_ms(ddp_out) - _backward_ms(single_out))
                step_ms[batch].append(1000 * batch * 2 / total)
                if batch == P3_BATCH:
                    res.ours.append(total)
                    res.baseline.append(2 * single)
                    res.ratios.append(total / (2 * single))
                else:
                    small_ratios.append(total / (2 * single))
            # Diagnostics: the same DDP program under bare torchrun, and two independent processes at once.
            _, out = timed([str(BIN / "torchrun"), "--nproc_per_node=2", str(prog), *_ddp_args(steps, P3_BATCH)])
            bare_ddp.append(sum(_throughputs(out)))
            pair = [
                subprocess.Popen([PY, str(prog), *_ddp_args(steps, P3_BATCH)], stdout=subprocess.PIPE, text=True)
                for _ in "ab"
            ]
            concurrent.append(sum(_throughputs(p.communicate()[0])[0] for p in pair))
    med = statistics.median
    res.notes.append(
        f"MLP 2048-2048-10 (8.4M parameters, 33 MB of gradients per step), batch {P3_BATCH} per process, "
        "gloo over loopback, torch.set_num_threads(1)"
    )
    res.notes.append(
        f"same DDP program under bare torchrun: {med(bare_ddp):.0f} samples/s "
        f"(ours ÷ torchrun {med(res.ours) / med(bare_ddp):.3f}); two independent "
        f"single processes at once: {med(concurrent):.0f} samples/s "
        f"({med(concurrent) / med(res.baseline):.3f} of 2 × one alone)"
    )
    for batch in (P3_BATCH, P3_SMALL_BATCH):
        res.notes.append(
            f"batch {batch}: DDP backward − single backward = {med(allreduce_ms[batch]):.0f} ms of a "
            f"{med(step_ms[batch]):.0f} ms DDP step (the allreduce the backward pass waits for)"
            + (
                f"; scaling at this batch {min(small_ratios):.3f} / {med(small_ratios):.3f} / {max(small_ratios):.3f}"
                if batch == P3_SMALL_BATCH
                else ""
            )
        )
    return res


# --- P4: object storage --------------------------------------------------------------------------


def p4_storage(repeat: int, quick: bool) -> Result:
    res = Result(
        "P4",
        "1 GiB upload+download via kftrain.storage ÷ plain boto3 (local S3 server)",
        at_least(0.90, "RSS < 300 MB"),
        unit="MB/s",
    )
    script = ROOT / "bench" / "bench_storage.py"
    if not script.exists():
        res.skipped = "bench/bench_storage.py missing"
        return res
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "storage.json"
        size = 256 if quick else 1024
        timed([PY, str(script), "--size-mb", str(size), "--repeat", str(repeat), "--json", str(out)])
        data = json.loads(out.read_text())
    ours, boto = data["results"]["kftrain"], data["results"]["boto3"]
    mib = data["size_mb"]
    # Throughput ratio (boto3 time / our time); spread from our slowest to our fastest round.
    base_time = boto["total"]["median"]
    res.ratios = [base_time / ours["total"][k] for k in ("max", "median", "min")]
    res.ours = [mib / ours["total"]["median"]]
    res.baseline = [mib / base_time]
    rss = float(ours["peak_rss_mb"])
    res.notes.append(
        f"{mib} MiB up + down per round, {data['repeat']} round(s); peak RSS over baseline: kftrain {rss:.0f} MB, "
        f"boto3 {float(boto['peak_rss_mb']):.0f} MB; throughput ratio upload "
        f"{boto['upload']['median'] / ours['upload']['median']:.2f}, "
        f"download {boto['download']['median'] / ours['download']['median']:.2f}"
    )
    if rss >= 300:
        res.also_missed = True
    return res


# --- P5: compile ---------------------------------------------------------------------------------


def p5_compile(repeat: int, quick: bool) -> Result:
    res = Result("P5", "compile every pipeline, cold process", Goal("< 3 s", lambda r: r < 3.0))
    code = (
        "import tempfile, pathlib\n"
        "from kfp import compiler\n"
        "from kftrain.cli.compile import discover, compiled_object\n"
        f"root = pathlib.Path({str(ROOT)!r})\n"
        "with tempfile.TemporaryDirectory() as tmp:\n"
        "    for t in discover(root):\n"
        "        if t.is_pipeline:\n"
        "            compiler.Compiler().compile(compiled_object(t), str(pathlib.Path(tmp) / 'p.yaml'))\n"
    )
    for _ in range(repeat):
        elapsed, _ = timed([PY, "-c", code])
        res.ours.append(elapsed)
        res.ratios.append(elapsed)  # an absolute goal: the "ratio" column holds seconds
    res.notes.append("P5's spread column is seconds, not a ratio")
    return res


# --- P6: data prep at scale -----------------------------------------------------------------------

P6_SIZES_MB = (1024, 4096, 8192)  # of Parquet on disk
P6_RSS_GOAL_MB = 1.5 * 1024


def p6_data_prep(repeat: int, quick: bool) -> list[Result]:
    """Prep's rows/s ÷ pyarrow streaming the same file through, and prep's peak RSS, at growing sizes on disk
    (bench/bench_prep.py)."""
    sizes = (16, 64) if quick else P6_SIZES_MB
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "prep.json"
        cmd = [PY, str(ROOT / "bench" / "bench_prep.py"), "--sizes-mb", ",".join(map(str, sizes))]
        timed([*cmd, "--repeat", str(repeat), "--workdir", tmp, "--json", str(out)])
        data = json.loads(out.read_text())
    results = []
    rss_by_size: dict[int, float] = {}
    for size in sizes:
        entry = data["sizes"][str(size)]
        rows, gib = entry["rows"], entry["bytes"] / 2**30
        res = Result(
            "P6",
            f"data prep rows/s, {size // 1024 if size >= 1024 else size / 1024:g} GiB of Parquet on disk ÷ pyarrow "
            "streaming read+write",
            at_least(0.80, f"RSS ≤ {P6_RSS_GOAL_MB / 1024:g} GiB"),
            unit="rows/s",
        )
        runs = {side: [r for r in entry["runs"] if r["side"] == side] for side in ("ours", "pyarrow")}
        for ours, base in zip(runs["ours"], runs["pyarrow"], strict=True):
            res.ours.append(rows / ours["seconds"])
            res.baseline.append(rows / base["seconds"])
            res.ratios.append(base["seconds"] / ours["seconds"])
        ours_rss = [r["rss_mb"] for r in runs["ours"]]
        base_rss = [r["rss_mb"] for r in runs["pyarrow"]]
        rss_by_size[size] = statistics.median(ours_rss)
        if max(ours_rss) > P6_RSS_GOAL_MB:
            res.also_missed = True
        note = (
            f"{gib:.2f} GiB: {rows:,} rows × 64 float32 features + label; peak RSS (min / median / max) ours "
            f"{_spread(ours_rss)} MB, pyarrow {_spread(base_rss)} MB"
        )
        reference = [r for r in entry["runs"] if r["side"] == "pyarrow-no-dictionary"]
        if reference:
            ours_s = statistics.median(r["seconds"] for r in runs["ours"])
            note += (
                f"; pyarrow with use_dictionary=False (once, for reference): {rows / reference[0]['seconds']:,.0f} "
                f"rows/s, ours ÷ it {reference[0]['seconds'] / ours_s:.3f}"
            )
        res.notes.append(note)
        results.append(res)
    first, last = sizes[0], sizes[-1]
    results[0].notes.append(
        f"memory as the input grows: ours' median peak RSS at {last} MiB ÷ at {first} MiB = "
        f"{rss_by_size[last] / rss_by_size[first]:.2f} ({rss_by_size[first]:.0f} → {rss_by_size[last]:.0f} MB) for "
        f"{last / first:g}× the input"
    )
    results[0].notes.append(
        "ours = prepare_dataset(out, source=file, train_shards=4): both passes (profile; encode, stratified split, "
        "sharded zstd Parquet); pyarrow = ParquetFile.iter_batches(65536) into one ParquetWriter(zstd), its "
        "defaults; each side its own process, interleaved, its peak RSS that of its run (started over after the "
        "imports); the file is in the page cache for both"
    )
    return results


def _spread(values: list[float]) -> str:
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


# --- P7: GPU -------------------------------------------------------------------------------------


def p7_gpu(repeat: int, quick: bool) -> Result:
    res = Result("P7", "reference trainer samples/s on a GPU ÷ bare torchrun", REPORTED)
    import torch

    if not torch.cuda.is_available():
        res.skipped = "no GPU on this machine: none was lent to this run (P7 runs where the device tool lends one)"
        return res
    prog = PROGRAMS / "ddp_throughput.py"
    for _ in range(repeat):
        _, out = timed([str(BIN / "torchrun"), "--nproc_per_node=1", str(prog), "--steps", "50"])
        bare = float(re.findall(r"THROUGHPUT (\S+)", out)[0])
        with tempfile.TemporaryDirectory() as tmp:
            job = Path(tmp) / "job.yaml"
            # One Master replica: the same single-process program, launched through kftrain.
            job.write_text(JOB_2.format(prog=prog, args="--steps, '50'").split("    Worker:")[0])
            _, out = timed([str(BIN / "kftrain"), "launch", "-f", str(job), "--local"])
        ours = float(re.findall(r"THROUGHPUT (\S+)", out)[0])
        res.ours.append(ours)
        res.baseline.append(bare)
        res.ratios.append(ours / bare)
    return res


# --- P8: image payload ------------------------------------------------------------------------------

P8_IMPORT_GOAL_S = 1.0
# Each image's size goal in MB (None: measured and reported). A Horovod image's figure includes Horovod.
P8_SIZE_GOALS_MB: dict[str, float | None] = {
    "launch": 300.0,
    "data": 300.0,
    "pytorch-cpu": 1100.0,
    "tensorflow-cpu": 2200.0,
    "horovod-pytorch-cpu": 1300.0,
    "horovod-tensorflow-cpu": None,
    "pytorch-cuda": None,
    "tensorflow-cuda": None,
}


def p8_images(repeat: int, quick: bool) -> list[Result]:
    """Each image's Python environment, slimmed as its build slims it, beside the same requirement set unslimmed
    (bench/bench_images.py), and its step's cold import; then each image built for real (:func:`p8_real_images`).
    ``KFTRAIN_BENCH_P8_IMAGES`` (comma-separated, e.g. ``launch,data``) measures some images only. An image whose
    requirement set cannot be installed here (an index that does not answer) gets a skipped row, not the others."""
    script = ROOT / "bench" / "bench_images.py"
    chosen = [i for i in os.environ.get("KFTRAIN_BENCH_P8_IMAGES", "").split(",") if i]
    images = chosen or (["launch"] if quick else list(P8_SIZE_GOALS_MB))
    data: dict[str, Any] = {}
    results = []
    for image in images:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "images.json"
            try:
                timed([PY, str(script), "--images", image, "--repeat", str(max(repeat, 3)), "--json", str(out)])
            except RuntimeError as exc:
                res = Result("P8", f"python-{image}: installed size ÷ unslimmed", Goal("report", lambda r: True))
                res.skipped = f"not installable here: {str(exc).strip().splitlines()[-1]}"[:200]
                results.append(res)
                continue
            data[image] = json.loads(out.read_text())[image]
        entry = data[image]
        size = entry["size_mb"] + (entry["horovod_mb"] or 0.0)
        unslimmed = entry["raw_mb"] + (entry["horovod_raw_mb"] or 0.0)
        goal_mb = P8_SIZE_GOALS_MB.get(image)
        import_goal = image == "launch"
        goal = (f"≤ {goal_mb:,.0f} MB" if goal_mb else "report") + (
            f", import ≤ {P8_IMPORT_GOAL_S:g} s" if import_goal else ""
        )
        res = Result(
            "P8",
            f"{entry['image']}: installed size ÷ unslimmed ({', '.join(entry['extras'])}"
            f"{'; ' + entry['variant'] if entry['variant'] else ''}) and step import",
            Goal(goal, lambda r: True),
            unit="MB",
        )
        res.ours, res.baseline, res.ratios = [size], [unslimmed], [size / unslimmed]
        imports = entry["import_s"]
        import_s = statistics.median(imports)
        if (goal_mb and size > goal_mb) or (import_goal and import_s > P8_IMPORT_GOAL_S):
            res.also_missed = True
        own = (
            f", of which kftrain's own modules {statistics.median(entry['own_import_s']):.2f} s"
            if entry["own_import_s"]
            else ""
        )
        horovod = (
            f" (+ Horovod {entry['horovod_mb']:.0f} MB, {entry['horovod_raw_mb']:.0f} unslimmed)"
            if entry["horovod_mb"]
            else ""
        )
        res.notes.append(
            f"{entry['image']}: {entry['size_mb']:.0f} MB{horovod} ({', '.join(entry['requirements'])}"
            f"{', from PyPI alone' if entry['from_pypi_only'] else ''}); unslimmed {entry['raw_mb']:.0f} MB; "
            f"imports checked in the slimmed folder: {', '.join(dict.fromkeys(entry['checked_imports']))}; cold "
            f"import of {', '.join(entry['entry'])}: median {import_s:.2f} s (min {min(imports):.2f}, max "
            f"{max(imports):.2f}){own}; largest: " + ", ".join(f"{n} {mb:.0f} MB" for n, mb in entry["largest"])
        )
        results.append(res)
    results[0].notes.append(
        "sizes: `pip install --target` of the image's requirement set (this checkout with the extras its "
        "Dockerfile installs, -c constraints.txt, and its VARIANT arm's framework: the cpu torch from this machine's "
        "wheels, a cuda variant from PyPI alone) into an empty folder (bytecode compiled), then slimmed as the image's "
        "build slims it (containers/slim_site_packages.py), bytes of every file; baseline = the same set unslimmed; "
        "a Horovod image adds Horovod's files from the test venv's cached build (the other framework's library left "
        "out); the data image's baked builtin: samples (about 0.2 MB) not counted; base image and apt packages not "
        "counted; imports in `python -S` with only that folder on the path. Before the per-framework Horovod images, "
        "a PyTorch Horovod user pulled python-horovod-cpu: 3,318 MB + Horovod (both frameworks, unslimmed; the run "
        "of 2026-11-26 00:56 UTC)"
    )
    return results + p8_real_images(images, data)


P8_WARM_GOAL_S = 10.0


def p8_real_images(images: list[str], payload: dict[str, Any]) -> list[Result]:
    """Each image built for real (bench/bench_built_images.py: buildah, FROM the Debian-made base): its size beside
    the payload estimated above, its cold build, and a warm `make images` of it (the inputs' key checked only)."""
    warm = Result(
        "P8",
        "warm `make images` per image: its inputs' key checked, nothing built",
        Goal(f"≤ {P8_WARM_GOAL_S:g} s", lambda r: r <= P8_WARM_GOAL_S),
    )
    if os.geteuid() != 0 or not (shutil.which("buildah") or shutil.which("apt-get")):
        warm.skipped = "needs root, and buildah or apt-get to install it (scripts/install_image_tools.sh)"
        return [warm]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "built.json"
        timed([PY, str(ROOT / "bench" / "bench_built_images.py"), "--images", ",".join(images), "--json", str(out)])
        data = json.loads(out.read_text())
    results = []
    for image in images:
        entry = data[image]
        res = Result(
            "P8", f"{entry['image']}: real image ÷ its estimate (payload + base image)", Goal("report", lambda r: True)
        )
        res.unit = "MB"
        results.append(res)
        if "skipped" in entry:
            res.skipped = entry["skipped"]
            continue
        if image not in payload:
            res.skipped = f"built ({entry['size_mb']:.0f} MB), but its payload estimate was not measured here"
        else:
            estimate = payload[image]["size_mb"] + (payload[image]["horovod_mb"] or 0.0) + entry["base_mb"]
            res.ours, res.baseline, res.ratios = [entry["size_mb"]], [estimate], [entry["size_mb"] / estimate]
        cold = (
            f"{entry['cold_s'] / 60:.1f} min ({'no layer reused' if entry['cold_no_layer_cache'] else 'layers reused'}"
            f", {entry['cold_date']})"
            if entry["cold_s"] is not None
            else "not recorded"
        )
        res.notes.append(
            f"{entry['image']}: {entry['size_mb']:.0f} MB as built (the base image's {entry['base_mb']:.0f} MB and apt "
            "packages included); build "
            f"cold {cold}, warm {entry['warm_s']:.1f} s; {entry['builder']}"
        )
        warm.ours.append(entry["warm_s"])
        warm.ratios.append(entry["warm_s"])  # an absolute goal: the "ratio" column holds seconds
    if warm.ratios:
        warm.notes.append("warm `make images`: the spread column is seconds, not a ratio")
    else:
        warm.skipped = "no image built here"
    return [*results, warm]


# --- P9: launcher cost at scale ------------------------------------------------------------------------


def p9_launcher(repeat: int, quick: bool) -> Result:
    jobs, duration = (4, 8.0) if quick else (50, 60.0)
    settle = 2 if quick else 10
    res = Result(
        "P9",
        f"API requests per job-minute while running, {jobs} launch steps ÷ TrainingClient.wait_for_job_conditions",
        at_most(0.25, "RSS ≤ 150 MB", "all end"),
        unit="req/job-min",
    )
    script = ROOT / "bench" / "bench_launcher.py"
    polling = 2 if quick else 15  # quick: the SDK must see the end of an 8 s job; full: its default
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "launcher.json"
        args = ["--jobs", str(jobs), "--duration", str(duration), "--polling", str(polling)]
        args += ["--settle", str(settle)]
        timed([PY, str(script), *args, "--json", str(out)])
        data = json.loads(out.read_text())
    ours, base = data["ours"], data["baseline"]
    steady_ours, steady_base = ours["steady_requests_per_job_minute"], base["steady_requests_per_job_minute"]
    res.ours = [steady_ours]
    res.baseline = [steady_base]
    res.ratios = [steady_ours / steady_base if steady_base else float("inf")]
    all_ended = ours["ok"] == jobs and base["ok"] == jobs
    if ours["rss_mb"]["max"] > 150 or not all_ended:
        res.also_missed = True
    for side in (ours, base):
        verbs = ", ".join(f"{k} {v:.1f}" for k, v in side["requests_by_verb_per_job"].items())
        res.notes.append(
            f"{side['side']}: {side['ok']}/{jobs} jobs ended as they should; per job: {verbs} "
            f"({side['requests_per_job']:.1f} requests, {side['requests_per_job_minute']:.2f} per job-minute over "
            f"the whole run, fixed costs included); at most open: {side['peak_open'] or 'nothing'}; launcher RSS "
            f"median {side['rss_mb']['median']:.0f} MB, max {side['rss_mb']['max']:.0f} MB; CPU "
            f"{side['cpu_s_per_job_minute']:.2f} s per job-minute"
        )
    res.notes.append(
        f"{jobs} PyTorchJobs (Master + 3 Workers, {duration:g} s each, a log line per replica per second) at once "
        f"against testbed/fake_k8s; steady state = each job from {settle} s after it runs to its end; baseline: "
        f"kubeflow-training 1.9.4, polling_interval {polling} s, no log streaming; ours streams every replica's "
        f"log and renews its two watches every watch_window_s (300 s): 0.4 requests per job-minute on longer jobs"
    )
    return res


# --- P10: checkpoint stall ------------------------------------------------------------------------

P10_EVERY = 100  # steps between checkpoints (~66 s on a quiet 2-core machine): one 0.8 GB upload (~32 s) fits


def p10_checkpoint_stall(repeat: int, quick: bool) -> Result:
    res = Result(
        "P10",
        "step time, ~100M-parameter MLP (CPU), async checkpoint to S3 every N steps ÷ no checkpoint",
        at_most(1.05),
    )
    steps, every = (40, 20) if quick else (2 * P10_EVERY, P10_EVERY)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p10.json"
        cmd = [PY, str(PROGRAMS / "checkpoint_stall.py"), "--steps", str(steps), "--every", str(every)]
        timed([*cmd, "--repeat", str(repeat), "--json", str(out)])
        data = json.loads(out.read_text())
    res.ratios = data["round_ratios"]["async"]
    res.ours = [r["async"] for r in data["rounds"]]
    res.baseline = [r["none"] for r in data["rounds"]]
    sync = data["round_ratios"]["sync"]
    res.notes.append(
        f"MLP of {data['parameters'] / 1e6:.0f}M parameters, SGD with momentum, batch 16, "
        f"{data['threads']} training thread(s); a checkpoint ({data['checkpoint_mb']:.0f} MB: weights and momentum) "
        f"every {every} of {steps} timed steps to a local moto S3 server, through the trainers' own "
        "save_checkpoint and Checkpointer (1 in flight); modes interleaved in each round"
    )
    res.notes.append(
        f"synchronous checkpoint (max_in_flight=0), for reference: {statistics.median(sync):.3f} × no checkpoint "
        f"({min(sync):.3f} / {max(sync):.3f}); async: waits for a free slot {data['save_waited_s']['async']:.2f} s "
        f"per run, last upload drained after the last step in {data['drain_s']['async']:.1f} s (not in the ratio)"
    )
    return res


# --- P11: what the launch step's pod downloads on KFP's backend --------------------------------------


def p11_launch_download(repeat: int, quick: bool) -> list[Result]:
    """What a step's pod downloads before its code runs: the launch step (nothing of the dataset), and evaluation
    and export at each KFP release (the model alone, not what the job left beside it)."""
    mib, model_mib = (64, 4) if quick else (1024, 16)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p11.json"
        cmd = [PY, str(ROOT / "bench" / "bench_launch_download.py"), "--mib", str(mib), "--model-mib", str(model_mib)]
        timed([*cmd, "--json", str(out)])
        data = json.loads(out.read_text())
    releases = data["releases"]
    newest = releases[list(releases)[-1]]["folder"]
    launch = Result(
        "P11",
        f"bytes the launch step's pod downloads before it starts, {mib} MiB dataset, KFP 2.17 ÷ the dataset",
        Goal("0 bytes", lambda r: r == 0),
        unit="MiB",
    )
    size = data["dataset_bytes"]
    launched = sum(newest["pytorchjob-launch"].values())
    launch.ours, launch.baseline, launch.ratios = [launched / 2**20], [size / 2**20], [launched / size]
    launch.notes.append(
        "compiled pytorch-digits resolved by the harness's driver, inputs downloaded by its launcher from a local S3 "
        "server, with each release's rules (testbed/kfp_backend/versions.py); the launch step downloads "
        + ", ".join(f"{name}: {sum(r['folder']['pytorchjob-launch'].values())} bytes" for name, r in releases.items())
        + " (every step takes the dataset by URI)"
    )
    results = [launch]
    model = data["model_bytes"]
    for name, release in releases.items():
        ours = {step: release["folder"][step]["model"] for step in ("evaluate-model", "export-model")}
        before = {step: release["provisioned"][step]["model"] for step in ("evaluate-model", "export-model")}
        row = Result(
            "P11",
            f"bytes of the {model_mib} MiB model input the evaluation and export pods download, KFP {name} ÷ the "
            "model's size (baseline: the model's URI as recorded before, without its closing /)",
            Goal("= 1.00: the model alone", lambda r: abs(r - 1.0) < 1e-9),
            unit="MiB",
        )
        row.ours = [sum(ours.values()) / len(ours) / 2**20]
        row.baseline = [sum(before.values()) / len(before) / 2**20]
        row.ratios = [max(ours.values()) / model]
        row.notes.append(
            f"KFP {name}: "
            + "; ".join(
                f"{step}: model {ours[step] / 2**20:.1f} MiB (before: {before[step] / 2**20:.1f} MiB)"
                + "".join(f", {k} {v} bytes" for k, v in release["folder"][step].items() if k != "model")
                for step in ours
            )
        )
        results.append(row)
    stored = ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in data["stored"].items())
    results[-1].notes.append(
        f"what the launch step's output holds in the bucket: {stored} (the job's checkpoints, 3 kept at 2× the model; "
        "its replicas' logs and TensorBoard files; a staging prefix a killed writer left); before 2.17 a pod given "
        "the model copies every key that starts with its key (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/"
        "object_store.go:123-148); the launch step records the model as its folder, .../model/ "
        "(kftrain.launch.component.folder_uri)"
    )
    return results


# --- P12: evaluation at scale ----------------------------------------------------------------------------

P12_ROWS = 2_000_000  # test rows at 1x
P12_RSS_GROWTH_GOAL = 1.2


def p12_evaluation(repeat: int, quick: bool) -> list[Result]:
    """evaluate_model's rows/s ÷ the runtime's bare loop over the same Parquet batches, at 1x and 4x the test split,
    and its peak RSS at each (bench/bench_evaluation.py)."""
    rows, scales = (20_000, (1, 4)) if quick else (P12_ROWS, (1, 4))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "evaluation.json"
        cmd = [PY, str(ROOT / "bench" / "bench_evaluation.py"), "--rows", str(rows)]
        cmd += ["--scales", ",".join(map(str, scales)), "--repeat", str(repeat), "--workdir", tmp, "--json", str(out)]
        timed(cmd)
        data = json.loads(out.read_text())
    runtime = {"torchscript": "torch.jit.load model under no_grad", "onnx": "onnxruntime InferenceSession"}
    small, big = scales
    results = []
    for fmt in ("torchscript", "onnx"):
        runs = [r for r in data["runs"] if r["format"] == fmt]

        def rate(scale: int, side: str, runs: list[dict[str, Any]] = runs) -> list[float]:
            return [r["rows"] / r["seconds"] for r in runs if r["scale"] == scale and r["side"] == side]

        def rss(scale: int, side: str, runs: list[dict[str, Any]] = runs) -> list[float]:
            return [r["rss_mb"] for r in runs if r["scale"] == scale and r["side"] == side]

        test_rows = data["test_rows"][str(small)]
        res = Result(
            "P12",
            f"evaluate_model rows/s, {test_rows / 1e6:.2g} M-row test split, {fmt} ÷ bare {runtime[fmt]} loop "
            "over the same Parquet batches",
            at_least(0.80, f"RSS at {big}× ≤ {P12_RSS_GROWTH_GOAL:g} × at 1×"),
            unit="rows/s",
        )
        res.ours, res.baseline = rate(small, "ours"), rate(small, "bare")
        res.ratios = [o / b for o, b in zip(res.ours, res.baseline, strict=True)]
        big_ratios = [o / b for o, b in zip(rate(big, "ours"), rate(big, "bare"), strict=True)]
        growth = statistics.median(rss(big, "ours")) / statistics.median(rss(small, "ours"))
        bare_growth = statistics.median(rss(big, "bare")) / statistics.median(rss(small, "bare"))
        if growth > P12_RSS_GROWTH_GOAL:
            res.also_missed = True
        res.notes.append(
            f"{fmt}: at {big}× ({data['test_rows'][str(big)]:,} rows) ours ÷ bare {_ratio_spread(big_ratios)}; peak "
            f"RSS (min / median / max) ours {_spread(rss(small, 'ours'))} MB at 1×, {_spread(rss(big, 'ours'))} MB "
            f"at {big}× ({growth:.2f}×); bare {_spread(rss(small, 'bare'))} → {_spread(rss(big, 'bare'))} MB "
            f"({bare_growth:.2f}×)"
        )
        results.append(res)
    results[0].notes.append(
        f"a multi-class MLP ({data['features']} float32 features → {data['hidden']} → {data['hidden']} → "
        f"{data['classes']} classes, saved by save_model) on a dataset prepared by prepare_dataset "
        f"({data['shards'][str(small)]} test shards at 1×, {data['shards'][str(big)]} at {big}×); ours = "
        "evaluate_model(model, dataset, 'test'): the split streamed, every multi-class metric; bare = "
        "ParquetFile.iter_batches of each shard, the feature columns stacked, the model run, the accuracy counted "
        "(both must agree); each run its own process, timed from the model's load to the last batch, its peak RSS "
        "that span's (started over after the imports), sides interleaved; torch with its default threads; "
        "onnxruntime with its default threads on both sides, bare with its default spinning, ours with idle "
        "threads that sleep (kftrain.models.predictors.onnx_session: the batch reader runs beside it)"
    )
    return results


# --- P13: a Python function as a job, beside the Kubeflow SDK's local process backend ------------------------


def p13_function_job(repeat: int, quick: bool) -> list[Result]:
    """A torch function that all-reduces one tensor, run as a job by kftrain's function job path and by the Kubeflow
    SDK's local process backend, each from its call to the job's end (bench/bench_function_job.py)."""
    one = Result(
        "P13",
        "a torch function (gloo all-reduce) as a 1-process job, call to Complete: kftrain launch --local (TrainJob, "
        "function_command) ÷ Kubeflow SDK 0.5.0 TrainerClient + LocalProcessBackendConfig",
        at_most(0.25),
    )
    two = Result(
        "P13",
        "the same function on 2 nodes × 2 processes by kftrain ÷ its 1 × 1 (the SDK's local process backend runs "
        "1 node × 1 process only: no peer figure)",
        REPORTED,
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p13.json"
        cmd = [PY, str(ROOT / "bench" / "bench_function_job.py"), "--repeat", str(repeat), "--json", str(out)]
        timed([*cmd, *(["--no-reference"] if quick else [])])
        data = json.loads(out.read_text())
    rounds = data["rounds"]
    one.ours = [r["ours"] for r in rounds]
    one.baseline = [r["peer"]["seconds"] for r in rounds]
    one.ratios = [o / b for o, b in zip(one.ours, one.baseline, strict=True)]
    two.ours, two.baseline = data["ours_2x2"], one.ours
    two.ratios = [o / b for o, b in zip(two.ours, two.baseline, strict=True)]
    installed = rounds[0]["peer"]["installed"]
    nvidia = [p for p in installed if p.startswith(("nvidia-", "cuda-"))]
    downloaded = sum(r["peer"]["downloaded"] for r in rounds)
    one.notes.append(
        f"ours: `kftrain launch -f trainjob.yaml --local`, a TrainJob on torch-distributed (1 node, numProcPerNode 1) "
        f"whose command is function_command(func, packages_to_install=[{data['torch_requirement']!r}], "
        "prefix=[torchrun, --no-python]), timed from the command's start to its exit (kftrain's start-up included); "
        "a local run installs nothing (torch is kftrain's environment's). Peer: the Kubeflow SDK 0.5.0, "
        "TrainerClient(backend_config=LocalProcessBackendConfig()).train(runtime=get_runtime('torch-distributed'), "
        "trainer=CustomTrainer(func, packages_to_install=[the same])), timed from train() to get_job(...).status "
        "Complete (polled every 50 ms); rounds interleaved; the same function's source on both sides "
        "(bench/programs/allreduce_function.py), each rank's sum checked"
    )
    one.notes.append(
        f"what the peer does per job: a new virtual environment (venv --without-pip, ensurepip), pip install of "
        f"{len(installed)} packages ({', '.join(p for p in installed if p.startswith(('torch-', 'triton-')))}, "
        f"{len(nvidia)} nvidia-*/cuda-* libraries, {data['peer_wheels_mb'] / 1000:.1f} GB of wheels), the function "
        "under its torchrun, the environment removed. pip's cache cannot hold those wheels here (the registry "
        "answers without caching headers), so each timed job installs them from a local folder of the same wheels "
        "with PIP_NO_INDEX, asking no index: faster than a warm cache; "
        f"{downloaded} file(s) downloaded by the timed jobs"
    )
    reference = data.get("peer_downloading")
    pytorchjob = data["ours_pytorchjob"]
    one.notes.append(
        (
            f"the peer as its docs run it, downloading torch and its dependencies from the registry (once, for "
            f"reference): {reference['seconds']:.1f} s; "
            if reference
            else "the peer's downloading run left out (--quick); "
        )
        + f"ours as a PyTorchJob with a Master only, the function run by python itself (no torchrun), for "
        f"reference: {statistics.median(pytorchjob):.2f} s ({min(pytorchjob):.2f} / {max(pytorchjob):.2f})"
        + (f"; made for this run: {_p13_install(data['peer_install_s'])}" if data["peer_install_s"] else "")
    )
    two.notes.append(
        "2 × 2: a TrainJob with numNodes 2, numProcPerNode 2, the same command (torchrun starts each node's 2 "
        "processes), 4 ranks checked; the SDK's local process backend has one runtime with num_nodes=1 and runs "
        "torchrun without --nproc-per-node, so it has no multi-node or multi-process run to set beside it"
    )
    return [one, two]


def _p13_install(took: dict[str, float]) -> str:
    names = {"sdk_s": "the SDK's virtual environment", "wheels_s": "the download of torch's wheels"}
    return ", ".join(f"{names[k]} {v:.0f} s" for k, v in took.items())


def _ratio_spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


# --- P14: P9 on the real API server ------------------------------------------------------------------


def p14_launcher_real_apiserver(repeat: int, quick: bool) -> Result:
    jobs, duration = (4, 8.0) if quick else (50, 60.0)
    settle = 2 if quick else 10
    res = Result(
        "P14",
        f"API requests per job, {jobs} launch steps on kube-apiserver 1.36.3 + training-operator ÷ the same on the "
        "fake API server (P9's), its operator at the real one's pace",
        at_most(1.10, "all end"),
        unit="req/job",
    )
    sys.path.insert(0, str(ROOT))
    from testbed.controlplane.cluster import missing_binaries
    from testbed.controlplane.kubeflow_operators import missing_operators

    missing = missing_binaries(with_controller_manager=True) + missing_operators(["training-operator"])
    if missing:
        res.skipped = f"the control plane is not built ({', '.join(missing)}): make controlplane"
        return res
    args = ["--jobs", str(jobs), "--duration", str(duration), "--settle", str(settle)]
    with tempfile.TemporaryDirectory() as tmp:
        real_json, fake_json = Path(tmp) / "real.json", Path(tmp) / "fake.json"
        timed([PY, str(ROOT / "bench" / "bench_launcher_controlplane.py"), *args, "--json", str(real_json)])
        real = json.loads(real_json.read_text())
        # The fake side twice: its operator at the real one's pace (the row's figure: the same steps meeting the same
        # wait for pods, on another API server), and creating pods at once, as in P9.
        fake_side = [PY, str(ROOT / "bench" / "bench_launcher.py"), *args, "--only", "ours", "--json", str(fake_json)]
        timed([*fake_side, "--reconcile", f"{real['operator_s_per_job']:.3f}"])
        fake = json.loads(fake_json.read_text())["ours"]
        timed(fake_side)
        at_once = json.loads(fake_json.read_text())["ours"]
    res.ours, res.baseline = [real["requests_per_job"]], [fake["requests_per_job"]]
    res.ratios = [real["requests_per_job"] / fake["requests_per_job"]]
    res.also_missed = real["ok"] != jobs or fake["ok"] != jobs or at_once["ok"] != jobs
    verbs = ", ".join(f"{k} {v:.1f}" for k, v in real["requests_by_what_per_job"].items())
    steady = real["steady_requests_per_job_minute"]
    res.notes.append(
        f"real: {real['ok']}/{jobs} jobs ended as they should; per job: {verbs}; steady state "
        f"{steady if steady is None else f'{steady:.3f}'} requests per job-minute (fake: "
        f"{fake['steady_requests_per_job_minute']:.3f}); {real['log_lines_per_step']:.0f} log lines followed per step "
        f"through the API server; kube-apiserver CPU {real['apiserver_cpu_s']:.1f} s over the run, "
        f"{real['apiserver_cpu_s_per_job_minute']:.2f} s per job-minute (its operator's, garbage collector's and the "
        f"node agent's requests included: the agent lists every pod 10 times a second); launcher RSS median "
        f"{real['rss_mb']['median']:.0f} MB, CPU {real['cpu_s_per_job_minute']:.2f} s per job-minute"
    )
    delay = real["pods_created_after_s"]
    if delay:
        res.notes.append(
            f"real: training-operator created a job's last pod {delay['median']:.0f} s after the job (median; max "
            f"{delay['max']:.0f} s, whole seconds; its one worker took {real['operator_s_per_job']:.2f} s per job); "
            f"{delay['over_first_read']}/{delay['jobs']} jobs lacked pods past the launch step's first read of create "
            "failures (2 s after, then at twice the last wait): the list events above"
        )
    fake_verbs = ", ".join(f"{k} {v:.1f}" for k, v in fake["requests_by_verb_per_job"].items())
    res.notes.append(
        f"fake (baseline column): its operator creates one job's pods at a time, {real['operator_s_per_job']:.2f} s "
        f"each, the real one's pace in this run (a job's pods {fake['pods_created_after_s']['median']:.1f} s after "
        f"it, median; max {fake['pods_created_after_s']['max']:.1f} s); {fake['ok']}/{jobs} ended as they should; "
        f"per job: {fake_verbs}. "
        f"With pods at once, as in P9: {at_once['requests_per_job']:.2f} req/job, ratio "
        f"{real['requests_per_job'] / at_once['requests_per_job']:.3f} (the reads of create failures are the "
        "difference: none are made there)"
    )
    res.notes.append(
        f"{jobs} PyTorchJobs (Master + 3 Workers, every pod running {duration:g} s, a log line per pod per second), "
        "created and followed by the launch step's own function, one process each; the real side counts the launch "
        "steps' requests in kube-apiserver's audit log (their own ServiceAccount), the fake side counts them on "
        "testbed/fake_k8s (bench/bench_launcher.py)"
    )
    return res


# --- P15: the real control plane itself ----------------------------------------------------------------------

P15_START_S, P15_RSS_GIB, P15_STOP_S = 30.0, 1.5, 10.0  # what two test workers can each pay per module, on 2 cores


def p15_controlplane(repeat: int, quick: bool) -> Result:
    res = Result(
        "P15",
        "warm start of the controlplane tests' fixture: etcd, kube-apiserver 1.36.3, kube-controller-manager and the "
        "four operators, each ready ÷ etcd and kube-apiserver with the CRDs alone (the same starts' phases)",
        Goal(
            f"report; start ≤ {P15_START_S:g} s, RSS ≤ {P15_RSS_GIB:g} GiB, stop ≤ {P15_STOP_S:g} s, "
            "a warm build builds nothing",
            lambda r: True,
        ),
    )
    sys.path.insert(0, str(ROOT))
    from testbed.controlplane.cluster import missing_binaries
    from testbed.controlplane.kubeflow_operators import OPERATORS, missing_operators

    missing = missing_binaries(with_controller_manager=True) + missing_operators(list(OPERATORS))
    if missing and shutil.which("go") is None:
        res.skipped = f"the control plane is not built ({', '.join(missing)}), and there is no Go here to build it"
        return res
    idle = 3.0 if quick else 10.0
    args = ["--repeat", str(repeat), "--idle", str(idle), *([] if quick else ["--cold"])]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p15.json"
        timed([PY, str(ROOT / "bench" / "bench_controlplane.py"), *args, "--json", str(out)])
        data = json.loads(out.read_text())
    starts = data["starts"]
    res.ours = [s["start_s"] for s in starts]
    res.baseline = [s["phases_s"]["crds"] for s in starts]
    res.ratios = [s["start_s"] / s["phases_s"]["crds"] for s in starts]
    rss_gib = data["rss_total_bytes_median"] / 2**30
    res.also_missed = (
        data["start_s_median"] > P15_START_S
        or rss_gib > P15_RSS_GIB
        or data["stop_s_median"] > P15_STOP_S
        or not data["warm_build"]["built_nothing"]
        or any(s["left_running"] for s in starts)
    )
    phases = ", ".join(
        f"{name} {statistics.median(s['phases_s'][name] for s in starts):.1f} s" for name in starts[0]["phases_s"]
    )
    res.notes.append(f"start, each phase done after (median): {phases}; the whole start {data['start_s_median']:.1f} s")
    rss = ", ".join(
        f"{name} {statistics.median(s['rss_bytes'][name] for s in starts) / 2**20:.0f}"
        for name in starts[0]["rss_bytes"]
    )
    cpu = ", ".join(
        f"{name} {statistics.median(s['idle_cpu_s'][name] for s in starts) * 60 / data['idle_s']:.2f}"
        for name in starts[0]["idle_cpu_s"]
    )
    res.notes.append(
        f"memory after {data['idle_s']:g} s idle: {rss_gib * 1024:.0f} MiB in all (MiB: {rss}); CPU seconds per "
        f"idle minute: {data['idle_cpu_s_per_min_median']:.2f} in all ({cpu}); stop {data['stop_s_median']:.1f} s "
        f"(median), processes left running: {sum(len(s['left_running']) for s in starts)}"
    )
    warm = data["warm_build"]
    res.notes.append(
        f"warm build (both scripts, caches filled, as make controlplane runs on every test run): {warm['s']:.2f} s, "
        + ("nothing built" if warm["built_nothing"] else f"**built** {', '.join(warm['built'])}")
        + (f"; this run first built what was missing: {_built(data['first_build'])}" if "first_build" in data else "")
    )
    if "cold_build" in data:
        cold = data["cold_build"]
        sizes = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in cold["bytes"].items())
        res.notes.append(
            f"cold build (empty Go module, build and binary caches; modules from the Go module proxy): "
            f"{_built(cold)}; caches filled: {sizes}"
        )
    res.notes.append(
        f"{len(starts)} start(s) of testbed.controlplane.cluster.control_plane with operators "
        f"{', '.join(data['operators'])} (bench/bench_controlplane.py); the ratio is what kube-controller-manager "
        "and the operators add to the API server's own start"
    )
    return res


def _built(build: dict[str, Any]) -> str:
    parts = ", ".join(f"{name} {s} s" for name, s in build["built"].items())
    return f"{build['s'] / 60:.1f} min in all ({parts})"


# --- P16: LLM fine-tuning through the launch step ------------------------------------------------------------

P16_EPOCHS = 1  # 67 optimizer steps of 32 examples: tokens/s settles within the first 20


def p16_llm_finetune(repeat: int, quick: bool) -> list[Result]:
    """The fine-tuning program's tokens/s through the PyTorchJob launch step on the local backend ÷ under bare
    torchrun, at 1 and 2 replicas, sides interleaved (bench/bench_llm_finetune.py --compare)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p16.json"
        cmd = [PY, str(ROOT / "bench" / "bench_llm_finetune.py"), "--compare", "--repeat", str(1 if quick else repeat)]
        timed([*cmd, "--epochs", str(P16_EPOCHS), "--replicas", "1,2", "--workdir", tmp, "--json", str(out)])
        data = json.loads(out.read_text())
    results = []
    for replicas in (1, 2):
        runs = {side: [r for r in data["runs"] if r["replicas"] == replicas and r["side"] == side]
                for side in ("bare", "launch")}  # fmt: skip
        res = Result(
            "P16",
            f"LLM fine-tuning tokens/s (tiny Llama, builtin:reverse), {replicas} replica(s) through the PyTorchJob "
            "launch step on the local backend ÷ bare torchrun",
            at_least(0.95),
            unit="tokens/s",
        )
        res.ours = [r["tokens_per_s"] for r in runs["launch"]]
        res.baseline = [r["tokens_per_s"] for r in runs["bare"]]
        res.ratios = [o / b for o, b in zip(res.ours, res.baseline, strict=True)]

        def figure(side: str, key: str, runs: dict[str, list[dict[str, Any]]] = runs) -> str:
            return _spread([r[key] for r in runs[side]]) if key != "load_average" else _loads(runs[side])

        named = {"tokens_per_s": "tokens/s", "train_seconds": "train s", "wall_seconds": "wall s (start to end)",
                 "peak_rss_mb_max_process": "peak RSS of its largest process (MB)",
                 "program_cpu_seconds": "the program's CPU s",
                 "load_average": "1-min load average at its start"}  # fmt: skip
        parts = [f"{name} launch {figure('launch', key)}, bare {figure('bare', key)}" for key, name in named.items()]
        losses = sorted({round(r["loss"], 6) for side in runs.values() for r in side})
        res.notes.append(
            f"{replicas} replica(s), {'2 threads' if replicas == 1 else '1 thread each'} (--threads on both sides), "
            f"min / median / max: {'; '.join(parts)}; the launch step's own peak RSS "
            f"{figure('launch', 'launch_step_rss_mb')} MB, CPU {figure('launch', 'launch_step_cpu_seconds')} s; "
            f"final loss {losses}"
        )
        results.append(res)
    results[0].notes.append(
        f"kftrain.programs.hf_finetune --method full --lr 0.003 --epochs {P16_EPOCHS} --global-batch-size 32 "
        "--batch-size 32 --threads 2/N on prepare_instructions(builtin:reverse) (2,160 train rows); bare = torchrun "
        "--standalone --nproc-per-node N with OMP_NUM_THREADS=1; launch = pytorchjob_launch's Python function as a "
        "pipeline calls it (testbed.launch_harness.call_launch: backend local, command python -m the program, args "
        "the launch's URI flags then the same flags, workers N-1), so it also checkpoints each epoch next to the "
        "model as the pipeline does; tokens/s is each run's rank-0 summary line (trained tokens ÷ training seconds, "
        "startup excluded); each run its own process (bench/finetune_sides.py), its peak RSS from getrusage of its "
        "children; sides alternate bare, launch per pair"
    )
    return results


def _loads(runs: list[dict[str, Any]]) -> str:
    values = [r["load_average"] for r in runs]
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


# --- P17: pods on the real node -------------------------------------------------------------------------------

P17_TARGET_S = 5.0  # Kubernetes' pod startup SLO: p99 of pod creation to Running, without an image pull


def p17_node_pods(repeat: int, quick: bool) -> Result:
    res = Result(
        "P17",
        "pod creation to Running on the real node (kubelet 1.36.3, containerd 1.6.20, runc, CNI bridge; no pull), "
        f"20 pods one at a time ÷ Kubernetes' pod startup target ({P17_TARGET_S:g} s)",
        at_most(1.0, f"p99 ≤ {P17_TARGET_S:g} s"),
    )
    sys.path.insert(0, str(ROOT))
    from testbed.controlplane import node_pods
    from testbed.controlplane.node_images import image_exists
    from testbed.dockerfiles import image_env

    why = node_pods.missing() or (
        "" if image_exists(node_pods.LAUNCH_IMAGE, image_env()) else f"{node_pods.LAUNCH_IMAGE} not built"
    )
    if why:
        res.skipped = why
        return res
    pods = 5 if quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p17.json"
        timed([PY, str(ROOT / "bench" / "bench_node_pods.py"), "--pods", str(pods), "--json", str(out)])
        data = json.loads(out.read_text())
    res.ours = data["seconds"]
    res.baseline = [P17_TARGET_S]
    res.ratios = [s / P17_TARGET_S for s in data["seconds"]]
    res.also_missed = data["p99_s"] > P17_TARGET_S
    rss = ", ".join(f"{name} {b / 2**20:.0f}" for name, b in data["rss_bytes"].items())
    res.notes.append(
        f"{pods} pods (sleep in the launch image), each created, timed to a watch event showing it Running, then "
        f"deleted: p50 {data['p50_s']:.2f} s, p99 {data['p99_s']:.2f} s, mean {data['mean_s']:.2f} s; the cluster "
        f"with its node started in {data['start_s']:.1f} s (node phases: "
        + ", ".join(f"{k[5:]} {v:.1f} s" for k, v in data["phases_s"].items() if k.startswith("node "))
        + f"); memory meanwhile (MiB): {rss}"
    )
    return res


BENCHES: dict[str, Callable[[int, bool], Result | list[Result]]] = {
    "P1": p1_pipeline_overhead,
    "P2": p2_launch_latency,
    "P3": p3_scaling,
    "P4": p4_storage,
    "P5": p5_compile,
    "P6": p6_data_prep,
    "P7": p7_gpu,
    "P8": p8_images,
    "P9": p9_launcher,
    "P10": p10_checkpoint_stall,
    "P11": p11_launch_download,
    "P12": p12_evaluation,
    "P13": p13_function_job,
    "P14": p14_launcher_real_apiserver,
    "P15": p15_controlplane,
    "P16": p16_llm_finetune,
    "P17": p17_node_pods,
}


def machine() -> str:
    import torch

    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.system()} {platform.release()}"
    )


def kept_results(text: str, run: set[str]) -> dict[str, Any]:
    """From an earlier results.md: the table rows and notes of the keys not in ``run``, by key, and the run each
    comes from (that file's date and machine, or the earlier run that file itself kept it from)."""
    rows: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    source = []
    carried: dict[str, str] = {}
    for line in text.splitlines():
        if (row := re.match(r"\| (P\d+) \|", line)) and row.group(1) not in run:
            rows.setdefault(row.group(1), []).append(line)
        elif kept := re.match(r"- ((?:P\d+, )*P\d+): kept from an earlier run \((.*)\)$", line):
            carried.update({key: kept.group(2) for key in kept.group(1).split(", ")})
        elif (note := re.match(r"- (P\d+): ", line)) and note.group(1) not in run:
            notes.setdefault(note.group(1), []).append(line)
        elif (found := re.match(r"-.*?\b(date|machine): (.*)", line)) and len(source) < 2:
            source.append(f"{found.group(1)} {found.group(2)}")
    this_file = "; ".join(source) or "unknown"
    sources = {key: carried.get(key, this_file) for key in rows}
    return {"sources": sources, "rows": rows, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated keys, e.g. P1,P5")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--storage-repeat",
        type=int,
        default=None,
        help="repeats of P4 (1 GiB through a local S3 server is slow); default: --repeat",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results.md"))
    parser.add_argument(
        "--keep-others",
        action="store_true",
        help="keep the rows and notes of the keys not run from the --out file already there (each row says "
        "which run it comes from)",
    )
    args = parser.parse_args(argv)
    results = []
    for key in [k.strip() for k in args.only.split(",") if k.strip()]:
        print(f"running {key} ...", flush=True)
        started = time.perf_counter()
        before = load.calibrate()
        try:
            repeat = args.storage_repeat if key == "P4" and args.storage_repeat else args.repeat
            found = BENCHES[key](repeat, args.quick)
            found = found if isinstance(found, list) else [found]
        except Exception as exc:  # one broken bench must not hide the others
            found = [Result(key, BENCHES[key].__name__, Goal("—", lambda r: False), skipped=f"error: {exc}"[:300])]
        after = load.calibrate()
        for r in found:
            r.busy = before.busy or after.busy
        found[-1].notes.append(load.describe(before, after))
        results += found
        print(f"  {key} done in {time.perf_counter() - started:.0f}s", flush=True)
    run_keys = [r.key for r in results]
    header = [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}",
        f"- repeats: {args.repeat}{' (quick mode: smaller sizes)' if args.quick else ''}; "
        "baseline and ours interleaved; verdict on the median",
        "- load: each key's last note gives the machine's load before and after it (bench/load.py: a CPU loop "
        f"alone, then one copy per core at once; contention above {load.BUSY_CONTENTION:g} flags the row as run "
        "on a busy machine)",
    ]
    # A bench may give several rows under one key (P8: one per image).
    rows: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for r in results:
        rows.setdefault(r.key, []).append(r.row())
        notes.setdefault(r.key, []).extend(f"- {r.key}: {note}" for note in r.notes)
    order = {key: i for i, key in enumerate(BENCHES)}
    if args.keep_others and Path(args.out).exists():
        kept = kept_results(Path(args.out).read_text(), set(run_keys))
        by_source: dict[str, list[str]] = {}
        for key in sorted(kept["rows"], key=lambda k: order.get(k, len(order))):
            by_source.setdefault(kept["sources"][key], []).append(key)
        header += [f"- {', '.join(keys)}: kept from an earlier run ({source})" for source, keys in by_source.items()]
        rows = {**kept["rows"], **rows}
        notes = {**kept["notes"], **notes}
    keys = sorted(rows, key=lambda k: order.get(k, len(order)))
    lines = [
        "# Benchmark results",
        "",
        *header,
        "",
        "| key | what | ours (median) | baseline (median) | ratio min / median / max | goal | verdict |",
        "|---|---|---|---|---|---|---|",
        *[row for k in keys for row in rows[k]],
        "",
        "Notes:",
        "",
        *[line for k in keys for line in notes.get(k, [])],
        "",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``kftrain run``: run a pipeline on this machine with KFP's local runner.

Each step runs as a subprocess of this Python (no containers, no pip install at run time); the
launch step then runs the training job's replicas through the local backend. With ``--storage s3``
the artifacts go to a throw-away local S3 server (:mod:`kftrain.cli.local_s3`) instead of the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.cli.local_s3 import environment
from kftrain.cli.params import parse_params
from kftrain.cli.pipelines import load_pipeline

DEFAULT_PIPELINE = "pytorch-digits"


@dataclass(frozen=True)
class LocalRun:
    pipeline: str
    pipeline_root: Path  # one folder per run, one per step inside it
    seconds: float


def init_local_runner(pipeline_root: str | Path) -> Path:
    """Make KFP's local runner run what is called next (a pipeline, or one component as a task): each step a
    subprocess of this environment (``SubprocessRunner``, no venv), its outputs under ``pipeline_root``; a failed
    step raises. Returns the pipeline root, resolved."""
    from kfp import local

    root = Path(pipeline_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    # The local runner warns about images without "python" in the name; ours run in this venv.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    return root


def run_locally(name: str, params: Mapping[str, Any], pipeline_root: str | Path, *, verbose: bool = True) -> LocalRun:
    """Run the pipeline ``name`` (shipped, or ``module:function``) to its end; a failed step raises.

    Not ``verbose``: one line per step and the training's progress (:mod:`kftrain.cli.quiet`).
    """
    if not verbose:
        from kftrain.cli.quiet import quiet_output

        with quiet_output():
            return run_locally(name, params, pipeline_root)
    root = init_local_runner(pipeline_root)
    pipeline = load_pipeline(name)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    started = time.monotonic()
    # The steps' temporary files (KFP writes each step's program to a `mktemp -d` folder it never removes) go to a
    # folder of this run, removed at its end, as a task pod's /tmp goes with the pod.
    scratch = tempfile.mkdtemp(prefix="kftrain-run-")
    try:
        with environment({"TMPDIR": scratch}):
            pipeline(**params)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return LocalRun(pipeline=name, pipeline_root=root, seconds=time.monotonic() - started)


def cmd_run(args: argparse.Namespace) -> int:
    """``kftrain run``: run the pipeline, then list each step's outputs and scalar metrics."""
    params = parse_params(args.param, args.params_file)
    verbose = bool(getattr(args, "verbose", False) or getattr(args, "run_verbose", False))
    if args.storage == "s3":
        from kftrain import storage
        from kftrain.cli.local_s3 import BUCKET, environment, local_s3

        with local_s3() as s3_env, environment({**s3_env, storage.ARTIFACT_ROOT_ENV: f"s3://{BUCKET}/runs"}):
            run = run_locally(args.pipeline, params, args.pipeline_root, verbose=verbose)
            print(f"\n[kftrain] artifacts on s3://{BUCKET}/runs (local S3 server {s3_env['AWS_ENDPOINT_URL']}):")
            fs, path = storage.filesystem(f"s3://{BUCKET}/runs")
            for entry in sorted(fs.find(path)):
                if entry.endswith(storage.COMPLETE_MARKER):
                    print(f"  s3://{entry.rsplit('/', 1)[0]}")
        print("[kftrain] the local S3 server has stopped; its objects were in memory")
    else:
        run = run_locally(args.pipeline, params, args.pipeline_root, verbose=verbose)
    print(f"\n[kftrain] pipeline {run.pipeline} succeeded in {run.seconds:.1f}s")
    print(f"[kftrain] outputs under {run.pipeline_root}:")
    newest = max((p for p in run.pipeline_root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for step in sorted(p for p in newest.iterdir() if p.is_dir()):
        for artifact in sorted(p for p in step.iterdir() if p.name != "executor_output.json"):
            print(f"  {artifact}")
        for name, value in _scalar_metrics(step / "executor_output.json").items():
            print(f"  {step.name}: {name} = {value}")
    return 0


def _scalar_metrics(executor_output: Path) -> dict[str, Any]:
    """The scalar metrics a step logged (KFP Metrics artifacts keep them in metadata only)."""
    if not executor_output.exists():
        return {}
    out: dict[str, Any] = {}
    for name, entry in json.loads(executor_output.read_text()).get("artifacts", {}).items():
        for artifact in entry.get("artifacts", []):
            if name == "metrics":
                out.update(artifact.get("metadata", {}))
    return out

"""The ``kftrain`` command.

kftrain launch -f JOB.yaml --local [--command "..."] [--timeout S] [--dry-run]
kftrain validate -f JOB.yaml [--crd-dir DIR]
kftrain run [PIPELINE] [--param NAME=VALUE ...] [--pipeline-root DIR]
kftrain compile [--check] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from kftrain import __version__
from kftrain.cli.kfp.submit import add_commands as add_kfp_commands
from kftrain.errors import JobFailedError, KftrainError
from kftrain.signals import Terminated


def _launch(args: argparse.Namespace) -> int:
    from kftrain.backends import LocalOptions
    from kftrain.backends.local import parse_command_overrides
    from kftrain.job import load_manifest_file, render_yaml
    from kftrain.launch import run_job

    job = load_manifest_file(args.file)
    if args.name:
        job.metadata.name = args.name
    if args.dry_run:
        sys.stdout.write(render_yaml(job))
        return 0
    backend = "local" if args.local else args.backend
    options = LocalOptions(
        commands=parse_command_overrides(args.command or []),
        workdir=Path(args.workdir) if args.workdir else None,
    )
    result = run_job(
        job, backend=backend, timeout=args.timeout, local_options=options, identity_path=args.identity_file
    )
    print(f"[kftrain] {result.describe()}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from kftrain.job import load_manifest_file, render_manifest
    from kftrain.job.crd_schema import CRDSchemas

    job = load_manifest_file(args.file)
    manifest = render_manifest(job)
    if args.crd_dir:
        CRDSchemas.from_dir(args.crd_dir).validate(manifest)
    print(f"{args.file}: valid {job.kind.value} ({job.api_version})")
    return 0


def _parse_param(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise KftrainError(f"--param {text!r}: expected NAME=VALUE")
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


def _run(args: argparse.Namespace) -> int:
    from kftrain.cli.run import run_locally

    params = dict(_parse_param(p) for p in args.param or [])
    if args.storage == "s3":
        from kftrain import storage
        from kftrain.cli.local_s3 import BUCKET, environment, local_s3

        with local_s3() as s3_env, environment({**s3_env, storage.ARTIFACT_ROOT_ENV: f"s3://{BUCKET}/runs"}):
            run = run_locally(args.pipeline, params, args.pipeline_root)
            print(f"\n[kftrain] artifacts on s3://{BUCKET}/runs (local S3 server {s3_env['AWS_ENDPOINT_URL']}):")
            fs, path = storage.filesystem(f"s3://{BUCKET}/runs")
            for entry in sorted(fs.find(path)):
                if entry.endswith(storage.COMPLETE_MARKER):
                    print(f"  s3://{entry.rsplit('/', 1)[0]}")
        print("[kftrain] the local S3 server has stopped; its objects were in memory")
    else:
        run = run_locally(args.pipeline, params, args.pipeline_root)
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


def _compile(args: argparse.Namespace) -> int:
    from kftrain.cli.compile import compile_all

    root = Path(args.root).resolve()
    stale = compile_all(root, write=not args.check)
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(root)} (run `make compile` and commit)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        print(f"wrote {path.relative_to(root)}")
    if not stale:
        print("every compiled file is up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kftrain", description="Kubeflow distributed training components.")
    parser.add_argument("--version", action="version", version=f"kftrain {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command_name", required=True)

    launch = sub.add_parser("launch", help="run a TFJob/PyTorchJob/MPIJob manifest")
    launch.add_argument("-f", "--file", required=True, help="job manifest (YAML)")
    where = launch.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run the replicas as local processes")
    where.add_argument("--backend", default="auto", choices=["auto", "local", "kubernetes"])
    launch.add_argument(
        "--command",
        action="append",
        metavar="[TYPE=]CMD",
        help="program of replicas (all, or one replica TYPE); replaces the container's command+args",
    )
    launch.add_argument("--timeout", type=float, default=None, help="fail and stop the job after S seconds")
    launch.add_argument("--dry-run", action="store_true", help="print the normalized manifest and exit")
    launch.add_argument("--name", help="override metadata.name")
    launch.add_argument("--workdir", help="local backend: folder for the hostfile and replica logs")
    launch.add_argument("--identity-file", help="write the job's identity (JSON) here before waiting")
    launch.set_defaults(func=_launch)

    validate = sub.add_parser("validate", help="validate a job manifest (and against CRD schemas)")
    validate.add_argument("-f", "--file", required=True)
    validate.add_argument("--crd-dir", help="folder of CRD YAML files to validate against")
    validate.set_defaults(func=_validate)

    run = sub.add_parser("run", help="run a pipeline locally with KFP's local runner")
    run.add_argument("pipeline", nargs="?", default="pytorch-digits")
    run.add_argument("--param", action="append", metavar="NAME=VALUE", help="pipeline parameter (JSON or text)")
    run.add_argument("--pipeline-root", default="runs", help="where the local run's artifacts go")
    run.add_argument(
        "--storage",
        choices=["local", "s3"],
        default="local",
        help="s3: start a local S3 server and keep every dataset/model artifact on s3://",
    )
    run.set_defaults(func=_run)

    comp = sub.add_parser("compile", help="compile pipelines and components to their committed YAML")
    comp.add_argument("--check", action="store_true", help="fail naming every stale file instead of writing")
    comp.add_argument("--root", default=".", help="repository root")
    comp.set_defaults(func=_compile)

    add_kfp_commands(sub)  # submit, schedule: against a KFP API server
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return int(args.func(args))
    except JobFailedError as exc:
        print(f"[kftrain] {exc}", file=sys.stderr)
        return exc.exit_code or 1
    except KftrainError as exc:
        print(f"kftrain: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("[kftrain] terminated: the job was stopped", file=sys.stderr)
        return Terminated.exit_code
    except KeyboardInterrupt:
        print("[kftrain] interrupted: the job was stopped", file=sys.stderr)
        return 130

"""The ``kftrain`` command line: the parser, dispatch to each command, and the exit code of each error.

Exit codes: 0 success; a failed job's own exit code (1 when it has none); 2 for a usage or input
error (:class:`KftrainError`, and argparse's own); 143 when terminated; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from kftrain import __version__
from kftrain.cli.compile import cmd_compile
from kftrain.cli.jobs import add_commands as add_jobs_commands
from kftrain.cli.kfp import add_commands as add_kfp_commands
from kftrain.cli.launch import cmd_convert, cmd_launch, cmd_validate
from kftrain.cli.numbers import seconds, whole
from kftrain.cli.reference import COMPILE_HELP
from kftrain.cli.reference import HELP as PIPELINE_HELP
from kftrain.cli.run import DEFAULT_PIPELINE, cmd_run
from kftrain.errors import JobFailedError, KftrainError
from kftrain.redaction import add_uri_credentials, log_redacted, redact
from kftrain.signals import Terminated


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kftrain", description="Kubeflow distributed training components.")
    parser.add_argument("--version", action="version", version=f"kftrain {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command_name", required=True)

    launch = sub.add_parser("launch", help="run a TFJob/PyTorchJob/MPIJob/TrainJob manifest")
    launch.add_argument("-f", "--file", required=True, help="job manifest (YAML)")
    launch.add_argument(
        "--runtimes",
        action="append",
        metavar="PATH",
        help="TrainJob: a file or folder of TrainingRuntime/ClusterTrainingRuntime manifests (repeatable); "
        "the runtimes Trainer v2.3.0 installs are known by name without it",
    )
    where = launch.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run the replicas as local processes")
    where.add_argument("--backend", default="auto", choices=["auto", "local", "kubernetes"])
    launch.add_argument(
        "--command",
        action="append",
        metavar="[TYPE=]CMD",
        help="program of replicas (all, or one replica TYPE); replaces the container's command+args",
    )
    launch.add_argument("--timeout", type=seconds, default=None, help="fail and stop the job after S seconds")
    launch.add_argument("--dry-run", action="store_true", help="print the normalized manifest and exit")
    launch.add_argument("--name", help="override metadata.name")
    launch.add_argument("--workdir", help="local backend: folder for the hostfile and replica logs")
    launch.add_argument("--identity-file", help="write the job's identity (JSON) here before waiting")
    launch.add_argument(
        "--clean-env",
        action="store_true",
        help="local backend: replicas get an image-like environment (PATH, HOME, LANG...) plus what the "
        "manifest declares, not this shell's: what works so also works in a pod",
    )
    launch.add_argument(
        "--admit",
        action="store_true",
        help="local backend: run a suspended job (spec.suspend, runPolicy.suspend: true) as if its queue admitted it; "
        "without it a suspended job is refused, as the operator starts no replica of it",
    )
    launch.add_argument(
        "--max-local-replicas",
        type=whole("replicas", low=1),
        default=None,
        help="local backend: the most replicas a job may have on this machine (default 64)",
    )
    launch.set_defaults(func=cmd_launch)

    convert = sub.add_parser("convert", help="print the Trainer v2 TrainJob a PyTorchJob or MPIJob becomes")
    convert.add_argument("-f", "--file", required=True, help="PyTorchJob or MPIJob manifest (YAML)")
    convert.add_argument("--to", choices=["trainjob"], default="trainjob", help="the kind to convert to")
    convert.add_argument(
        "--runtime",
        help="the ClusterTrainingRuntime to run on (default: torch-distributed for a PyTorchJob, "
        "deepspeed-distributed for an MPIJob)",
    )
    convert.add_argument("--runtimes", action="append", metavar="PATH", help="runtime manifests (file or folder)")
    convert.set_defaults(func=cmd_convert)

    validate = sub.add_parser("validate", help="validate a job manifest (and against CRD schemas)")
    validate.add_argument("-f", "--file", required=True)
    validate.add_argument("--crd-dir", help="folder of CRD YAML files to validate against")
    validate.add_argument("--runtimes", action="append", metavar="PATH", help="TrainJob: runtime manifests")
    validate.set_defaults(func=cmd_validate)

    run = sub.add_parser("run", help="run a pipeline locally with KFP's local runner")
    run.add_argument("pipeline", nargs="?", default=DEFAULT_PIPELINE, help=f"{PIPELINE_HELP} (default: %(default)s)")
    run.add_argument("--param", action="append", metavar="NAME=VALUE", help="pipeline parameter (JSON or text)")
    run.add_argument("--params-file", metavar="FILE", help="pipeline parameters as a YAML mapping (--param wins)")
    run.add_argument("--pipeline-root", default="runs", help="where the local run's artifacts go")
    run.add_argument(
        "--mlflow",
        metavar="URI",
        default="",
        help="track the run on this MLflow server as KFP 2.17 does: a run per pipeline run, one per task in it "
        "(default: $MLFLOW_TRACKING_URI, when set)",
    )
    run.add_argument(
        "--storage",
        choices=["local", "s3"],
        default="local",
        help="s3: start a local S3 server and keep every dataset/model artifact on s3://",
    )
    run.add_argument(
        "--verbose",
        dest="run_verbose",
        action="store_true",
        help="show KFP's whole output (each step's executor_input, log and outputs), not two lines per step "
        "(started, finished) and the training's progress",
    )
    run.set_defaults(func=cmd_run)

    comp = sub.add_parser(
        "compile",
        help="compile a pipeline to YAML, or every shipped pipeline and component to its committed YAML",
        description="kftrain compile PIPELINE [-o FILE]: compile one pipeline for a cluster, with the images' "
        "registry (KFTRAIN_IMAGE_REGISTRY) and their pull secrets on every step (KFTRAIN_IMAGE_PULL_SECRETS) as "
        "the shipped pipelines get them. kftrain compile [--check] [--root DIR]: every pipeline.yaml and "
        "component.yaml of a kftrain checkout.",
    )
    comp.add_argument("pipeline", nargs="?", help=f"{COMPILE_HELP}; none: every committed file")
    comp.add_argument("-o", "--output", metavar="FILE", help="with PIPELINE: the file to write (default: NAME.yaml)")
    comp.add_argument("--check", action="store_true", help="fail naming every stale file instead of writing")
    comp.add_argument("--root", default=".", help="repository root")
    comp.set_defaults(func=cmd_compile)

    add_kfp_commands(sub)  # submit, schedule: against a KFP API server
    add_jobs_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    for given in sys.argv[1:] if argv is None else argv:
        add_uri_credentials(given)  # a password given here (--mlflow URI) is printed nowhere, by argparse neither
    args = build_parser().parse_args(argv)
    log_redacted(logging.DEBUG if args.verbose else logging.INFO, "%(levelname)s %(message)s")
    try:
        return _run(args)
    finally:
        _quiet_if_stdout_closed()


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except JobFailedError as exc:
        print(f"[kftrain] {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code or 1
    except KftrainError as exc:
        print(f"kftrain: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0  # our reader (``| head``) has all it wanted; the job itself already ended
    except OSError as exc:
        # A file or folder given on the command line (--workdir, --identity-file) that cannot be used.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"kftrain: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        why = getattr(exc, "left_running", "") or "the job was stopped"  # left running: an evicted pod's job
        print(f"[kftrain] terminated ({exc}): {why}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("[kftrain] interrupted: the job was stopped", file=sys.stderr)
        return 130


def _quiet_if_stdout_closed() -> None:
    """When our reader closed the pipe, point stdout at /dev/null: Python's own flush at exit would complain."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())

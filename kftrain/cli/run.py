"""``kftrain run``: run a pipeline on this machine with KFP's local runner.

Each step is a subprocess of this Python; the launch step runs the job's replicas on the local backend; ``--storage
s3`` puts the artifacts on a throw-away S3 server (:mod:`kftrain.cli.local_s3`). The pipeline and its parameters are
checked first; everything temporary lives in one folder, removed on return. A failure is the failed step's own error
(:mod:`kftrain.cli.quiet`) and one line naming the task, exit code 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.cli.isolated import ImportTags, compile_isolated
from kftrain.cli.param_values import check_param_values, types_of_pipeline
from kftrain.cli.params import parse_params
from kftrain.cli.quiet import QuietFilter, StepFailure, quiet_output
from kftrain.cli.reference import Kind, check_params, load_pipeline, parameters, parse_reference
from kftrain.cli.run_signals import stop_steps_on_signal
from kftrain.environ import environment
from kftrain.errors import JobFailedError
from kftrain.redaction import redact
from kftrain.tracking.local import tracked_pipeline

DEFAULT_PIPELINE = "pytorch-digits"
# KFP's local runner's error when a pipeline's task failed (kubeflow/pipelines@2.17.0:
# sdk/python/kfp/local/pipeline_orchestrator.py, log_and_maybe_raise_for_failure), colors removed.
_PIPELINE_FAILED = re.compile(r"Pipeline '.+' finished with status \w+\. Inner task failed: (?P<tasks>.+)\.$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
HTML_TYPE = "system.HTML"  # an artifact a browser shows (dsl.HTML)


@dataclass(frozen=True)
class LocalRun:
    pipeline: str
    pipeline_root: Path  # one folder per run, one per step inside it
    seconds: float


def init_local_runner(pipeline_root: str | Path, workspace_root: str | Path | None = None) -> Path:
    """Make KFP's local runner run what is called next (a pipeline, or one component as a task): each step a
    subprocess of this environment (``SubprocessRunner``, no venv), its outputs under ``pipeline_root``; a failed
    step raises. ``workspace_root``: KFP's workspace folder (None: KFP makes one in the temporary folder, and removes
    it only at the end of a pipeline). Returns the pipeline root, resolved."""
    from kfp import local

    root = Path(pipeline_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    # The local runner warns about images without "python" in the name; ours run in this venv.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    workspace = str(workspace_root) if workspace_root is not None else None
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(root),
        workspace_root=workspace,
        raise_on_error=True,
    )
    return root


def load_for_run(given: str, params: Mapping[str, Any], tags: ImportTags | None = None) -> Any:
    """The pipeline ``given`` names, its parameters checked: every error here comes before anything is created.

    A user's module is imported first in a child process (:func:`kftrain.cli.isolated.compile_isolated`: an exit or
    a hang at import is reported there), then here, what it starts carrying ``tags``' token."""
    ref = parse_reference(given)
    if ref.kind is Kind.FUNCTION:
        with tempfile.TemporaryDirectory(prefix="kftrain-probe-") as tmp:
            compile_isolated(given, Path(tmp) / "pipeline.yaml", for_cluster=False)
    with tags.importing() if tags is not None else contextlib.nullcontext():
        pipeline = load_pipeline(ref)
    declared, required = parameters(pipeline)
    check_params(given, declared, required, params)
    check_param_values(given, types_of_pipeline(pipeline), params)
    return pipeline


@contextlib.contextmanager
def steps_without_cwd_on_path() -> Iterator[None]:
    """Within the block, KFP's local runner starts each step's Python with ``-P``.

    It starts a step as ``python3 -m kfp.dsl.executor_main ...`` (``python3`` replaced by this Python) in this
    process's folder (kubeflow/pipelines@2.17.0:sdk/python/kfp/local/subprocess_task_handler.py:
    ``replace_python_executable``, ``run_local_subprocess``), and ``-m`` puts that folder first on the step's
    ``sys.path``: a user's ``token.py`` beside the pipeline would replace the standard library's module in every step.
    ``-P`` (Python 3.11 and later; https://docs.python.org/3.11/using/cmdline.html#cmdoption-P) leaves that folder
    off, and is not inherited by the processes a step starts: the job's replicas still run ``python train.py`` with
    the script's folder first, as in a pod. The folder stays the steps' working folder (relative paths, the launch
    folder the replicas see). Python 3.10 has no ``-P``: there the steps run as KFP starts them.
    """
    if sys.version_info < (3, 11):
        yield
        return
    from kfp.local import subprocess_task_handler as handler

    plain = handler.replace_python_executable

    def with_safe_path(full_command: list[str], new_executable: str) -> list[str]:
        return plain(full_command, f"{new_executable} -P")

    handler.replace_python_executable = with_safe_path
    try:
        yield
    finally:
        handler.replace_python_executable = plain


def run_locally(
    given: str,
    pipeline: Any,
    params: Mapping[str, Any],
    pipeline_root: str | Path,
    *,
    verbose: bool = False,
    mlflow: str = "",
) -> LocalRun:
    """Run ``pipeline`` (loaded by :func:`load_for_run` from ``given``) to its end; a failed task raises
    :class:`JobFailedError` naming it. Not ``verbose``: two lines per step and the training's progress. With
    ``mlflow`` (a tracking URI) or ``MLFLOW_TRACKING_URI`` set, tracked in MLflow as KFP 2.17 tracks a pipeline run
    (:mod:`kftrain.tracking.local`)."""
    scratch = Path(tempfile.mkdtemp(prefix="kftrain-run-"))
    try:
        # KFP's workspace, and the steps' temporary files (KFP writes each step's program to a `mktemp -d` folder it
        # never removes), go to this run's folder, removed at its end as a task pod's /tmp goes with the pod.
        root = init_local_runner(pipeline_root, workspace_root=scratch / "workspace")
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        started = time.monotonic()
        watched: QuietFilter | None = None
        try:
            with (
                environment({"TMPDIR": str(scratch)}),
                steps_without_cwd_on_path(),
                stop_steps_on_signal(),
                quiet_output(show_all=verbose, gone=scratch) as watched,
                tracked_pipeline(
                    root,
                    mlflow,
                    register_model=str(params.get("register_model") or ""),
                    steps_uri=str(params.get("mlflow_tracking_uri") or ""),
                ),
            ):
                pipeline(**params)
        except RuntimeError as exc:
            failed = _PIPELINE_FAILED.search(_ANSI.sub("", str(exc)))
            if failed is None:
                raise
            tasks = [t.strip().strip("'") for t in failed.group("tasks").split(" inside ")]
            failures = watched.failures if watched is not None else []
            raise JobFailedError(_failure_line(given, tasks, failures, verbose=verbose)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return LocalRun(pipeline=given, pipeline_root=root, seconds=time.monotonic() - started)


def _failure_line(given: str, tasks: list[str], failures: list[StepFailure], *, verbose: bool) -> str:
    """``pipeline X failed: task T (inside G) failed[; its job's replica logs: kftrain jobs logs J]``."""
    task = tasks[0] + (f" (inside {' inside '.join(tasks[1:])})" if tasks[1:] else "")
    line = f"pipeline {given} failed: task {task} failed"
    failure = next((f for f in reversed(failures) if f.step == tasks[0]), None)
    if failure is not None and failure.job:
        line += f"; its job's replica logs: {failure.logs_command()}"
    return line if verbose else f"{line} (kftrain run --verbose shows the step's whole log)"


def cmd_run(args: argparse.Namespace) -> int:
    """``kftrain run``: run the pipeline, then list each step's outputs and scalar metrics."""
    params = parse_params(args.param, args.params_file)
    verbose = bool(getattr(args, "verbose", False) or getattr(args, "run_verbose", False))
    tags = ImportTags(args.pipeline)
    try:
        code = _run(args, params, load_for_run(args.pipeline, params, tags), verbose=verbose)
    finally:
        tags.stop_left()
    return tags.end(code)


def _run(args: argparse.Namespace, params: Mapping[str, Any], pipeline: Any, *, verbose: bool) -> int:
    if args.storage == "s3":
        from kftrain import storage
        from kftrain.cli.local_s3 import BUCKET, local_s3

        with local_s3() as s3_env, environment({**s3_env, storage.ARTIFACT_ROOT_ENV: f"s3://{BUCKET}/runs"}):
            run = run_locally(
                args.pipeline, pipeline, params, args.pipeline_root, verbose=verbose, mlflow=getattr(args, "mlflow", "")
            )
            print(f"\n[kftrain] artifacts on s3://{BUCKET}/runs (local S3 server {s3_env['AWS_ENDPOINT_URL']}):")
            fs, path = storage.filesystem(f"s3://{BUCKET}/runs")
            for entry in sorted(fs.find(path)):
                if entry.endswith(storage.COMPLETE_MARKER):
                    print(f"  s3://{entry.rsplit('/', 1)[0]}")
        print("[kftrain] the local S3 server has stopped; its objects were in memory")
    else:
        run = run_locally(
            args.pipeline, pipeline, params, args.pipeline_root, verbose=verbose, mlflow=getattr(args, "mlflow", "")
        )
    print(f"\n[kftrain] pipeline {run.pipeline} succeeded in {run.seconds:.1f}s")
    print(f"[kftrain] outputs under {run.pipeline_root}:")
    newest = max((p for p in run.pipeline_root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    html = html_outputs(pipeline)
    for step in sorted(p for p in newest.iterdir() if p.is_dir()):
        for artifact in sorted(p for p in step.iterdir() if p.name != "executor_output.json" and p.suffix != ".html"):
            print(f"  {browsable(artifact) if (step.name, artifact.name) in html else artifact}")
        for name, value in _scalar_metrics(step / "executor_output.json").items():
            print(redact(f"  {step.name}: {name} = {value}"))  # a step's output may quote a URI it was given
    return 0


def html_outputs(pipeline: Any) -> set[tuple[str, str]]:
    """The (task, output) pairs of ``pipeline`` whose artifact is declared ``system.HTML``, in any of its DAGs."""
    spec = pipeline.pipeline_spec
    html: set[tuple[str, str]] = set()
    for dag in [spec.root.dag, *(c.dag for c in spec.components.values())]:
        for task, task_spec in dag.tasks.items():
            outputs = spec.components[task_spec.component_ref.name].output_definitions.artifacts
            html.update((task, name) for name, out in outputs.items() if out.artifact_type.schema_title == HTML_TYPE)
    return html


def browsable(artifact: Path) -> str:
    """A ``file://`` link to ``artifact`` (an HTML file KFP's local runner names after its output, with no extension)
    that a browser renders: a link ``<name>.html`` beside it. The artifact itself stays where its URI says, which the
    pipeline's later steps and KFP's records use."""
    link = artifact.with_name(f"{artifact.name}.html")
    try:
        link.symlink_to(artifact.name)
    except FileExistsError:
        pass
    except OSError:  # a file system without symbolic links
        shutil.copyfile(artifact, link)
    return link.as_uri()


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

"""What a launch component's body does, in one call: its inputs to a job, the job run, the Model output filled in.

Every launch component (``components/training/*_launch``) takes the inputs :mod:`kftrain.launch.inputs` lists
for its kind; the component's body hands all of them to :func:`launch_component`. Every input is checked before
anything is created; a user error ends the step with a one-line message naming the input (exit code 2), a
failed job with the failing replica's last log lines and its exit code (:mod:`kftrain.step`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kftrain import images, storage
from kftrain.backends.base import JobResult
from kftrain.errors import JobFailedError, JobSpecError, KftrainError
from kftrain.job import TrainingJob, kind_for, kind_of
from kftrain.job.pod_settings import PodSettings
from kftrain.launch.identity import resolve_run_identity
from kftrain.launch.inputs import LaunchInputs, parse_launch_inputs
from kftrain.launch.observe import Observation, observing
from kftrain.launch.step import (
    CHECKPOINT_ENV,
    DATASET_ENV,
    MODEL_ENV,
    Artifacts,
    backend_config,
    job_from_manifest,
    prepare_job,
    run_job,
)
from kftrain.llm import model_io
from kftrain.models import describe_model
from kftrain.step import Artifact, MetricsArtifact, component_step
from kftrain.storage import output_uri
from kftrain.tracking.client import task_run
from kftrain.tracking.env import replica_env
from kftrain.tracking.training import launch_tags, logged_points

log = logging.getLogger(__name__)

# The flags this release's programs are given before the step's args; a program of the user's own gets
# the same URIs only as environment variables.
PROGRAM_FLAGS = (
    "--dataset",
    f"$({DATASET_ENV})",
    "--model-dir",
    f"$({MODEL_ENV})",
    "--checkpoint-dir",
    f"$({CHECKPOINT_ENV})",
)


def use_default_program(parsed: LaunchInputs, runtimes: Any) -> None:
    """With no command, this release's program for the kind (given the artifacts' flags), in its image."""
    request = parsed.request
    if request.command:
        return
    program = request.options.default_program(runtimes)
    request.command = list(program.command)
    request.args = [*PROGRAM_FLAGS, *request.args]
    if not request.image and not parsed.step.has_manifest:  # a manifest names its own images
        request.image = program_image(program.image, parsed.pods.gpus)


def program_image(name: str, gpus: int) -> str:
    """This release's image ``name`` for a job: the CUDA build when its replicas get GPUs, else the CPU build."""
    variant = images.CUDA if gpus > 0 else images.CPU
    if variant not in images.VARIANTS[name]:
        raise JobSpecError("image", f"this release has no {variant} build of {name}: give the job an image")
    return images.image(name, variant)


def launch_component(
    kind: str,
    *,
    model: Artifact,
    job: str,
    inputs: Mapping[str, Any],
    metrics: MetricsArtifact | None = None,
    curves: Artifact | None = None,
    task_config: Any = None,
) -> JobResult:
    """Build the job from ``inputs`` (or their ``manifest``), run it to its end, describe it on ``model``.

    The points the replicas report (the metrics contract, :mod:`kftrain.metrics`) end as ``metrics`` (final
    values) and ``curves`` (an HTML page); every replica's log and TensorBoard event files go beside the model.
    ``task_config`` is the launch task's own settings KFP passed through (a ``kfp.dsl.TaskConfig``, backend 2.15 and
    later: :meth:`~kftrain.job.pod_settings.PodSettings.from_task_config`), put on every replica below the explicit
    inputs.
    """
    step_kind = kind_for(kind)
    with component_step(), contextlib.ExitStack() as stack:
        parsed = parse_launch_inputs(step_kind, inputs)
        # The task's run KFP gave; else, given a tracking URI, one made for the step, named as KFP names the task.
        logging_to = task_run(
            "the launch step's MLflow logging", uri=parsed.step.mlflow_tracking_uri, run_name=f"{kind.lower()}-launch"
        )
        tracked = stack.enter_context(logging_to)
        request, step = parsed.request, parsed.step
        # The run and task are read from the output URI KFP gave, before it moves to object storage.
        identity = resolve_run_identity(step.run_id, step.task_id, model.uri)
        model.uri = output_uri(model.uri)
        if not step.dataset_uri and not request.command and not step.has_manifest:
            raise JobSpecError("dataset_uri", f"missing: this release's {kind} program reads a prepared dataset")
        runtimes = step_kind.runtimes_from_env()
        use_default_program(parsed, runtimes)
        training_job: TrainingJob = (
            job_from_manifest(step.manifest, kind, runtimes=runtimes)
            if step.has_manifest
            else request.to_job(runtimes=runtimes)
        )
        training_job = prepare_job(
            training_job,
            artifacts=Artifacts(step.dataset_uri, model.uri, step.checkpoint_uri),
            pods=parsed.pods,
            task=PodSettings.from_task_config(task_config) if task_config is not None else None,
            run_id=identity.run_id,
            task_id=identity.task_id,
            env=replica_env(run=tracked.tracking if tracked else None),  # for a program logging itself
        )
        log.info(
            "run %s, task %s (from %s): job %s", identity.run_id, identity.task_id, identity.source, training_job.name
        )
        config = backend_config(step.backend, identity_path=job, pending_timeout_s=step.pending_timeout_seconds or None)
        if tracked is not None:
            uris = {"model_uri": model.uri, "dataset_uri": step.dataset_uri, "checkpoint_uri": step.checkpoint_uri}
            tags = launch_tags(
                training_job,
                parsed.pods,
                uris,
                run_id=identity.run_id,
                task_id=identity.task_id,
                backend=type(config).__name__.removesuffix("Config").lower(),
            )
            tracked.set_tags(tags)
        with (
            observing(config, training_job, model.uri) as observer,
            logged_points(tracked, observer.collector),
        ):
            result = run_job(training_job, config, timeout=step.timeout_seconds or None)
        write_observation(observer.observation, metrics, curves)
        require_model_written(model.uri)
        model.metadata.update(_model_metadata(training_job, model.uri, result))
        model.uri = folder_uri(model.uri)
    return result


# The object-store schemes KFP's launcher copies an input artifact from (LocalPathForURI:
# kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go:882-896).
_DOWNLOADED_SCHEMES = ("gs://", "minio://", "s3://")


def folder_uri(uri: str) -> str:
    """The URI the Model output is recorded with: the model folder's, ending in ``/``.

    Before 2.17, KFP's launcher downloads an input artifact by listing its key as a raw prefix
    (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/object_store.go:123-148, DownloadBlob; the same through
    @2.16.0; @2.17.0 object_store.go:171-174 keeps only keys under ``<key>/``), so a step given ``.../model``
    would also get every object named after it: the job's ``model-checkpoints/``, ``model-logs/``,
    ``model-tensorboard/`` and a dead writer's ``model.partial-*`` staging. Listed as ``.../model/``, only the
    model's own files match, on every release. Renaming the output cannot do that: those siblings are named
    after whatever the model's name is. A local path (``kftrain run``) is left as it is."""
    return uri if uri.endswith("/") or not uri.startswith(_DOWNLOADED_SCHEMES) else uri + "/"


def write_observation(seen: Observation | None, metrics: MetricsArtifact | None, curves: Artifact | None) -> None:
    """The final values as KFP Metrics, the curves page as the HTML output."""
    if seen is None:
        return
    if metrics is not None:
        for name, value in seen.final.items():
            metrics.log_metric(name, value)
    if curves is not None:
        path = getattr(curves, "path", "")
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(seen.html, encoding="utf-8")


def require_model_written(model_uri: str) -> None:
    """A job that succeeded must have left something at its model output; say so clearly when it did not."""
    try:
        written = storage.exists(model_uri) and bool(storage.list_files(model_uri))
    except (KftrainError, NotADirectoryError):
        written = storage.exists(model_uri)
    if not written:
        raise JobFailedError(
            f"the job succeeded but wrote nothing to its model output {model_uri}: the program must write the "
            f"model there (every replica gets the URI as ${MODEL_ENV}; see the model contract in "
            "kftrain/models/README.md)"
        )


def _model_metadata(job: TrainingJob, model_uri: str, result: JobResult) -> dict[str, Any]:
    """What the Model output says about itself: its format (from its content), and the job that made it.

    A model evaluation and export would refuse is only warned about here: the job did what it was asked, and a
    pipeline of the user's own may read the folder its own way.
    """
    try:
        # A language model's folder is the language-model steps' to read, not the classifier contract's.
        described = model_io.describe(model_uri) or describe_model(model_uri).to_metadata()
    except KftrainError as exc:
        log.warning("the model does not follow the model contract (evaluation and export will refuse it): %s", exc)
        described = {"framework": ""}
    return {
        **described,
        "job": job.name,
        "api_version": job.api_version,
        **kind_of(job).summary(job),
        "duration_s": round(result.duration_s, 1),
    }

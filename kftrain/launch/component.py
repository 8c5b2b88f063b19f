"""What a launch component's body does, in one call: its inputs to a job, the job run, the Model output filled in.

Every launch component (``components/training/*_launch``) takes the same shared inputs plus its kind's
own; the component's body hands all of them to :func:`launch_component`. Every input is checked before
anything is created; a user error ends the step with a one-line message naming the input (exit code 2), a
failed job with the failing replica's last log lines and its exit code.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kftrain import images, storage
from kftrain.backends.base import JobResult
from kftrain.errors import JobFailedError, JobSpecError, KftrainError, fail_step
from kftrain.job import JobKind, TrainingJob, kind_of
from kftrain.launch.identity import resolve_run_identity
from kftrain.launch.observe import Observation, observing
from kftrain.launch.request import OPTIONS_OF_KIND, LaunchRequest
from kftrain.launch.settings import POD_INPUTS, pod_settings_from_inputs
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
from kftrain.models import describe_model
from kftrain.signals import Terminated
from kftrain.storage import output_uri

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trainer:
    """This release's trainer for a kind: what a launch step runs when it is given no image or command."""

    image: str
    program: tuple[str, ...]
    # What runs it when the options need a launcher in each replica (KindOptions.per_replica_launcher).
    launcher_program: tuple[str, ...] | None = None


TRAINERS = {
    # One process per replica: python itself (the operator's MASTER_ADDR, RANK, WORLD_SIZE). Elastic, or more
    # processes per replica: torchrun, which reads the operator's PET_* variables (nodes, or min:max and the
    # rendezvous, restarts, processes per node) and starts the replica's processes.
    JobKind.PYTORCHJOB: Trainer(
        images.PYTORCH,
        ("python", "-m", "kftrain.trainers.torch_ddp"),
        launcher_program=("torchrun", "--module", "kftrain.trainers.torch_ddp"),
    ),
    JobKind.TFJOB: Trainer(images.TENSORFLOW, ("python", "-m", "kftrain.trainers.tf_trainer")),
    # mpirun without -n starts one rank per slot of the hostfile.
    JobKind.MPIJOB: Trainer(
        images.HOROVOD_PYTORCH,
        ("mpirun", "--bind-to", "none", "--map-by", "slot", "python", "-m", "kftrain.trainers.horovod_torch"),
    ),
    # A TrainJob on a torch runtime: torchrun turns the runtime's PET_* variables into the DDP trainer's
    # RANK/WORLD_SIZE/MASTER_ADDR (on an MPI runtime, the MPIJob's Horovod trainer: see trainer_for).
    JobKind.TRAINJOB: Trainer(images.PYTORCH, ("torchrun", "-m", "kftrain.trainers.torch_ddp")),
}
# The flags this release's trainers are given before the step's args; a program of the user's own gets
# the same URIs only as environment variables.
TRAINER_FLAGS = (
    "--dataset",
    f"$({DATASET_ENV})",
    "--model-dir",
    f"$({MODEL_ENV})",
    "--checkpoint-dir",
    f"$({CHECKPOINT_ENV})",
)
# The step's own inputs: where and how long to run, and what identifies the run; none of them shape the job.
STEP_INPUTS = (
    "run_id",
    "task_id",
    "manifest",
    "checkpoint_uri",
    "backend",
    "timeout_seconds",
    "pending_timeout_seconds",
)


class Artifact(Protocol):
    """A KFP input or output artifact, as a component body sees it."""

    uri: str
    metadata: dict[str, Any]


class MetricsArtifact(Artifact, Protocol):
    """A KFP Metrics output."""

    def log_metric(self, metric: str, value: float) -> None: ...


def request_from_inputs(kind: JobKind, inputs: Mapping[str, Any]) -> LaunchRequest:
    """The typed request a launch component's inputs describe (the step's own inputs left aside)."""
    values = {k: v for k, v in inputs.items() if k not in STEP_INPUTS and k not in POD_INPUTS}
    options_type = OPTIONS_OF_KIND[kind]
    option_names = {f.name for f in dataclasses.fields(options_type)}
    options = options_type(**{k: values.pop(k) for k in list(values) if k in option_names})
    trainer = trainer_for(kind, options)
    if not values.get("command"):
        launcher = trainer.launcher_program if options.per_replica_launcher else None
        values["command"] = list(launcher or trainer.program)
        values["args"] = [*TRAINER_FLAGS, *values.get("args", ())]
    if not values.get("image"):
        # A manifest names its own images: the request's is then never used.
        manifest = str(inputs.get("manifest") or "").strip()
        values["image"] = "" if manifest else trainer_image(trainer, int(inputs.get("gpus") or 0))
    values["active_deadline_seconds"] = values.get("active_deadline_seconds") or None
    return LaunchRequest(kind=kind, pods=pod_settings_from_inputs(inputs), options=options, **values)


def trainer_for(kind: JobKind, options: object) -> Trainer:
    """This release's trainer for a job of ``kind``; a TrainJob's follows its runtime's ML policy."""
    runtime = getattr(options, "runtime", "")
    if kind == JobKind.TRAINJOB and runtime:
        from kftrain.job.trainer_catalog import RuntimeCatalog
        from kftrain.job.trainer_runtime import CLUSTER_RUNTIME

        if RuntimeCatalog.from_env().find(CLUSTER_RUNTIME, runtime).framework == "mpi":
            return TRAINERS[JobKind.MPIJOB]
    return TRAINERS[kind]


def trainer_image(trainer: Trainer, gpus: int) -> str:
    """This release's trainer image for a job: the CUDA build when its replicas get GPUs, else the CPU build."""
    variant = images.CUDA if gpus > 0 else images.CPU
    if variant not in images.VARIANTS[trainer.image]:
        raise JobSpecError("image", f"this release has no {variant} build of {trainer.image}: give the job an image")
    return images.image(trainer.image, variant)


def launch_component(
    kind: str,
    *,
    dataset: Artifact | None,
    model: Artifact,
    job: str,
    inputs: Mapping[str, Any],
    metrics: MetricsArtifact | None = None,
    curves: Artifact | None = None,
) -> JobResult:
    """Build the job from ``inputs`` (or their ``manifest``), run it to its end, describe it on ``model``.

    The points the replicas report (the metrics contract, :mod:`kftrain.metrics`) end as ``metrics`` (final
    values) and ``curves`` (an HTML page); every replica's log and TensorBoard event files go beside the model.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    job_kind = JobKind(kind)
    try:
        identity = resolve_run_identity(inputs.get("run_id") or "", inputs.get("task_id") or "", model.uri)
        model.uri = output_uri(model.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
        request = request_from_inputs(job_kind, inputs)
        if dataset is None and not inputs.get("command") and not str(inputs.get("manifest") or "").strip():
            raise JobSpecError("dataset", f"missing: this release's {kind} trainer reads a prepared dataset")
        training_job: TrainingJob
        if str(inputs.get("manifest") or "").strip():
            training_job = job_from_manifest(inputs["manifest"], job_kind)
        else:
            training_job = request.to_job()
        training_job = prepare_job(
            training_job,
            artifacts=Artifacts(dataset.uri if dataset else "", model.uri, inputs.get("checkpoint_uri", "")),
            pods=request.pods,
            run_id=identity.run_id,
            task_id=identity.task_id,
        )
        log.info(
            "run %s, task %s (from %s): job %s", identity.run_id, identity.task_id, identity.source, training_job.name
        )
        pending = inputs.get("pending_timeout_seconds", 600)
        config = backend_config(inputs.get("backend", "auto"), identity_path=job, pending_timeout_s=pending or None)
        with observing(config, training_job, model.uri) as observer:
            result = run_job(training_job, config, timeout=inputs.get("timeout_seconds") or None)
        write_observation(observer.observation, metrics, curves)
        require_model_written(model.uri)
    except KftrainError as exc:
        fail_step(str(exc), getattr(exc, "exit_code", 2))
    except Terminated:
        fail_step("terminated (run cancelled or pod evicted): the job was stopped", Terminated.exit_code)
    model.metadata.update(_model_metadata(training_job, model.uri, result))
    return result


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
        described = describe_model(model_uri).to_metadata()
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

"""What a launch component's body does, in one call: its inputs to a job, the job run, the Model output filled in.

Every launch component (``components/training/*_launch``) takes the same shared inputs plus its kind's
own; the component's body hands all of them to :func:`launch_component`. Every input is checked before
anything is created; a user error ends the step with a one-line message naming the input (exit code 2), a
failed job with the failing replica's last log lines and its exit code.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from kftrain import images, storage
from kftrain.backends.base import JobResult
from kftrain.errors import JobFailedError, JobSpecError, KftrainError
from kftrain.job import JobKind, TrainingJob, kind_of
from kftrain.launch.identity import resolve_run_identity
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
from kftrain.models import model_info
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
        images.HOROVOD,
        ("mpirun", "--bind-to", "none", "--map-by", "slot", "python", "-m", "kftrain.trainers.horovod_torch"),
    ),
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


def request_from_inputs(kind: JobKind, inputs: Mapping[str, Any]) -> LaunchRequest:
    """The typed request a launch component's inputs describe (the step's own inputs left aside)."""
    values = {k: v for k, v in inputs.items() if k not in STEP_INPUTS and k not in POD_INPUTS}
    options_type = OPTIONS_OF_KIND[kind]
    option_names = {f.name for f in dataclasses.fields(options_type)}
    options = options_type(**{k: values.pop(k) for k in list(values) if k in option_names})
    trainer = TRAINERS[kind]
    if not values.get("command"):
        launcher = trainer.launcher_program if options.per_replica_launcher else None
        values["command"] = list(launcher or trainer.program)
        values["args"] = [*TRAINER_FLAGS, *values.get("args", ())]
    values["image"] = values.get("image") or images.image(trainer.image)
    values["active_deadline_seconds"] = values.get("active_deadline_seconds") or None
    return LaunchRequest(kind=kind, pods=pod_settings_from_inputs(inputs), options=options, **values)


def launch_component(
    kind: str, *, dataset: Artifact | None, model: Artifact, job: str, inputs: Mapping[str, Any]
) -> JobResult:
    """Build the job from ``inputs`` (or their ``manifest``), run it to its end, describe it on ``model``."""
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
        result = run_job(training_job, config, timeout=inputs.get("timeout_seconds") or None)
        require_model_written(model.uri)
    except KftrainError as exc:
        fail_step(str(exc), getattr(exc, "exit_code", 2))
    except Terminated:
        fail_step("terminated (run cancelled or pod evicted): the job was stopped", Terminated.exit_code)
    model.metadata.update(_model_metadata(training_job, model.uri, result))
    return result


def require_model_written(model_uri: str) -> None:
    """A job that succeeded must have left something at its model output; say so clearly when it did not."""
    try:
        written = storage.exists(model_uri) and bool(storage.list_files(model_uri))
    except (KftrainError, NotADirectoryError):
        written = storage.exists(model_uri)
    if not written:
        raise JobFailedError(
            f"the job succeeded but wrote nothing to its model output {model_uri}: the program must write the "
            f"model there (every replica gets the URI as ${MODEL_ENV}; see the model contract in the README)"
        )


def _model_metadata(job: TrainingJob, model_uri: str, result: JobResult) -> dict[str, Any]:
    """What the Model output says about itself: the framework the trainer recorded, and the job that made it."""
    try:
        framework = str(model_info(model_uri).get("framework", ""))
    except KftrainError:
        framework = ""
    return {
        "framework": framework,
        "job": job.name,
        "api_version": job.api_version,
        **kind_of(job).summary(job),
        "duration_s": round(result.duration_s, 1),
    }


def fail_step(message: str, exit_code: int = 1) -> NoReturn:
    """End a pipeline step: the message in its log, the exit code as its status."""
    print(f"ERROR: {message}", file=sys.stderr)
    raise SystemExit(exit_code)

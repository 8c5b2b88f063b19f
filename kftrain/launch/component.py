"""What a launch component's body does, in one call: its inputs to a job, the job run, the Model output filled in.

Every launch component (``components/training/*_launch``) takes the same shared inputs plus its kind's
own; the component's body hands all of them to :func:`launch_component`. A user error (a bad input, an
invalid manifest) or a failed job ends the step with a one-line message and the job's exit code.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Mapping
from typing import Any, NoReturn, Protocol

from kftrain import images
from kftrain.backends.base import JobResult
from kftrain.errors import KftrainError
from kftrain.job import JobKind, PodSettings, TrainingJob, kind_of
from kftrain.launch.request import OPTIONS_OF_KIND, LaunchRequest
from kftrain.launch.step import Artifacts, backend_config, job_from_manifest, prepare_job, run_job
from kftrain.models import model_info
from kftrain.storage import output_uri

# The trainer image a kind's replicas run when the step is given none.
DEFAULT_IMAGE = {JobKind.PYTORCHJOB: images.PYTORCH, JobKind.TFJOB: images.TENSORFLOW, JobKind.MPIJOB: images.HOROVOD}
_POD_INPUTS = ("cpu", "memory", "gpus")
_STEP_INPUTS = ("run_id", "task_id", "manifest", "checkpoint_uri", "backend", "timeout_seconds", "trainer_args")


class Artifact(Protocol):
    """A KFP input or output artifact, as a component body sees it."""

    uri: str
    metadata: dict[str, Any]


def request_from_inputs(kind: JobKind, inputs: Mapping[str, Any]) -> LaunchRequest:
    """The typed request a launch component's inputs describe (the step's own inputs left aside)."""
    values = {k: v for k, v in inputs.items() if k not in _STEP_INPUTS}
    options_type = OPTIONS_OF_KIND[kind]
    option_names = {f.name for f in dataclasses.fields(options_type)}
    options = options_type(**{k: values.pop(k) for k in list(values) if k in option_names})
    pods = PodSettings(**{k: values.pop(k) for k in _POD_INPUTS if k in values})
    values["args"] = [*values.get("args", ()), *inputs.get("trainer_args", ())]
    values["image"] = values.get("image") or images.image(DEFAULT_IMAGE[kind])
    values["active_deadline_seconds"] = values.get("active_deadline_seconds") or None
    return LaunchRequest(kind=kind, pods=pods, options=options, **values)


def launch_component(
    kind: str, *, dataset: Artifact, model: Artifact, job: str, inputs: Mapping[str, Any]
) -> JobResult:
    """Build the job from ``inputs`` (or their ``manifest``), run it to its end, describe it on ``model``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    model.uri = output_uri(model.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    job_kind = JobKind(kind)
    try:
        request = request_from_inputs(job_kind, inputs)
        training_job: TrainingJob
        if str(inputs.get("manifest") or "").strip():
            training_job = job_from_manifest(inputs["manifest"], job_kind)
        else:
            training_job = request.to_job()
        training_job = prepare_job(
            training_job,
            artifacts=Artifacts(dataset.uri, model.uri, inputs.get("checkpoint_uri", "")),
            pods=request.pods,
            run_id=inputs.get("run_id", ""),
            task_id=inputs.get("task_id", ""),
        )
        config = backend_config(inputs.get("backend", "auto"), identity_path=job)
        result = run_job(training_job, config, timeout=inputs.get("timeout_seconds") or None)
    except KftrainError as exc:
        fail_step(str(exc), getattr(exc, "exit_code", 2))
    model.metadata.update(_model_metadata(training_job, model.uri, result))
    return result


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

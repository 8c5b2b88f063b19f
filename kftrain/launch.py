"""The launch step: build a training job from a component's inputs (or a manifest), run it, fail on failure.

One function serves TFJob, PyTorchJob and MPIJob; what differs per kind is only which replica
types the typed inputs fill in (:data:`REPLICA_LAYOUTS`) and which spec fields they set.

The artifact URIs reach every replica as environment variables (``KFTRAIN_DATASET_URI``,
``KFTRAIN_MODEL_URI``, ``KFTRAIN_CHECKPOINT_URI``) and, through Kubernetes' ``$(VAR)`` expansion,
in the trainer's arguments, so the same manifest works on both backends.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kftrain import __version__
from kftrain.backends import LocalOptions, make_backend, resolve_backend_name
from kftrain.backends.base import JobHandle, JobResult
from kftrain.backends.k8s_support import RUN_ID_LABEL, TASK_ID_LABEL, job_name_for, label_value
from kftrain.errors import JobFailedError, JobSpecError, KftrainError
from kftrain.job import (
    CleanPodPolicy,
    EnvVar,
    JobKind,
    JobSpec,
    ReplicaInput,
    RestartPolicy,
    RunPolicy,
    TrainingJob,
    build_job,
    load_manifest,
    main_container_name,
    validate_job,
)
from kftrain.signals import terminate_raises

log = logging.getLogger(__name__)

DATASET_ENV = "KFTRAIN_DATASET_URI"
MODEL_ENV = "KFTRAIN_MODEL_URI"
CHECKPOINT_ENV = "KFTRAIN_CHECKPOINT_URI"
_WHOLE_FLOAT = re.compile(r"^-?\d+\.0$")

# The replica type the "workers" input fills, and the fixed singletons, per kind.
REPLICA_LAYOUTS: dict[JobKind, tuple[str, ...]] = {
    JobKind.PYTORCHJOB: ("Master",),
    JobKind.TFJOB: (),
    JobKind.MPIJOB: ("Launcher",),
}


def job_name(prefix: str, run_id: str, task_id: str) -> str:
    """A deterministic job name for one task of one pipeline run (see :func:`job_name_for`).

    Derived at run time from KFP's run and task ids, never at compile time, so a restarted
    launcher finds the job it created instead of creating a second one.
    """
    if not run_id or not task_id:
        raise JobSpecError("run_id", "a job name needs the pipeline run id and task id (pass the KFP placeholders)")
    return job_name_for(run_id, task_id, base=prefix)


@dataclass
class LaunchInputs:
    """Typed inputs of a launch component, shared by the three kinds."""

    kind: JobKind
    name: str
    image: str
    command: Sequence[str]
    args: Sequence[str] = ()
    workers: int = 1
    replicas: Mapping[str, int] = field(default_factory=dict)  # extra types: PS, Evaluator, Chief
    restart_policy: str = "OnFailure"
    backoff_limit: int | None = 3
    active_deadline_seconds: int | None = None
    clean_pod_policy: str = "Running"
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Any] | None = None
    spec: JobSpec = field(default_factory=JobSpec)
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace: str | None = None
    api_version: str | None = None  # None: the kind's default (MPIJob: mpi-operator's v2beta1)


def command_line_value(value: object) -> str:
    """A list item from a pipeline as a command-line string.

    Pipeline parameters travel as protobuf numbers (doubles), so an int parameter placed in a list
    arrives as ``10.0`` (or the string ``"10.0"`` once interpolated); trainers expect ``10``.
    """
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text[:-2] if _WHOLE_FLOAT.match(text) else text


def job_from_inputs(inputs: LaunchInputs) -> TrainingJob:
    inputs.command = [command_line_value(a) for a in inputs.command]
    inputs.args = [command_line_value(a) for a in inputs.args]
    replicas: dict[str, ReplicaInput] = {}
    policy = RestartPolicy(inputs.restart_policy)
    for rtype in REPLICA_LAYOUTS[inputs.kind]:
        replicas[rtype] = ReplicaInput(
            1, command=inputs.command, args=inputs.args, restart_policy=policy, resources=inputs.resources
        )
    for rtype, count in inputs.replicas.items():
        if count:
            replicas[rtype] = ReplicaInput(
                count, command=inputs.command, args=inputs.args, restart_policy=policy, resources=inputs.resources
            )
    if inputs.kind == JobKind.MPIJOB:
        # MPI workers run sshd; only the launcher runs the program (mpirun ...).
        replicas["Worker"] = ReplicaInput(inputs.workers, restart_policy=policy, resources=inputs.resources)
    elif inputs.workers:
        replicas["Worker"] = ReplicaInput(
            inputs.workers, command=inputs.command, args=inputs.args, restart_policy=policy, resources=inputs.resources
        )
    spec = inputs.spec
    spec.run_policy = RunPolicy(
        clean_pod_policy=CleanPodPolicy(inputs.clean_pod_policy),
        backoff_limit=inputs.backoff_limit,
        active_deadline_seconds=inputs.active_deadline_seconds or None,
    )
    return build_job(
        inputs.kind,
        inputs.name,
        replicas,
        image=inputs.image,
        env=inputs.env,
        spec=spec,
        labels={"app.kubernetes.io/managed-by": "kftrain", "kftrain.io/version": __version__, **inputs.labels},
        namespace=inputs.namespace,
        api_version=inputs.api_version,
    )


def job_from_manifest(text: str, kind: JobKind, name: str | None = None) -> TrainingJob:
    job = load_manifest(text)
    if job.kind != kind:
        raise JobSpecError("kind", f"this step launches a {kind.value}, the manifest is a {job.kind.value}")
    if name:
        job.metadata.name = name
    return job


def inject_artifact_env(job: TrainingJob, uris: Mapping[str, str]) -> None:
    """Put artifact URIs (and the object store endpoint) into every replica's main container."""
    passthrough = {k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "MINIO_ENDPOINT", "AWS_REGION") if k in os.environ}
    values = {**passthrough, **{k: v for k, v in uris.items() if v}}
    main = main_container_name(job)
    for spec in job.replica_specs.values():
        containers = spec.template.spec.containers
        target = next((c for c in containers if c.name == main), containers[0] if containers else None)
        if target is None:
            continue
        existing = {e.name for e in target.env or []}
        target.env = [*(target.env or []), *(EnvVar(name=k, value=v) for k, v in values.items() if k not in existing)]
    validate_job(job)


def run_job(
    job: TrainingJob,
    *,
    backend: str = "auto",
    timeout: float | None = None,
    identity_path: str | None = None,
    local_options: LocalOptions | None = None,
) -> JobResult:
    """Run ``job`` to its end on ``backend``; raise :class:`JobFailedError` when it fails.

    The job's identity is written to ``identity_path`` before waiting, so whoever watches the step
    can find the job even if this process dies.
    """
    runner = make_backend(backend, local_options=local_options)
    with terminate_raises():
        handle = runner.submit(job)
        try:
            write_identity(handle, identity_path)
            result = runner.wait(handle, timeout)
        except BaseException:
            runner.cancel(handle)
            raise
    if not result.succeeded:
        raise JobFailedError(result.describe(), exit_code=result.exit_code or 1)
    return result


def write_identity(handle: JobHandle, path: str | None) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({k: v for k, v in vars(handle).items() if v is not None}, sort_keys=True))


def launch_step(
    *,
    kind: str,
    inputs: LaunchInputs | None,
    manifest: str,
    dataset_uri: str,
    model_uri: str,
    checkpoint_uri: str,
    backend: str,
    timeout_seconds: int,
    identity_path: str | None,
) -> JobResult:
    """What a launch component does, in one call."""
    job_kind = JobKind(kind)
    if manifest.strip():
        job = job_from_manifest(manifest, job_kind, inputs.name if inputs else None)
    elif inputs is not None:
        job = job_from_inputs(inputs)
    else:
        raise JobSpecError("manifest", "give either a manifest or the typed inputs")
    checkpoint_uri = checkpoint_uri or f"{model_uri.rstrip('/')}-checkpoints"
    inject_artifact_env(job, {DATASET_ENV: dataset_uri, MODEL_ENV: model_uri, CHECKPOINT_ENV: checkpoint_uri})
    resolved = resolve_backend_name(backend)
    log.info("launching %s %s on the %s backend", job.kind.value, job.name, resolved)
    return run_job(job, backend=resolved, timeout=timeout_seconds or None, identity_path=identity_path)


def resources_of(cpu: str = "", memory: str = "", gpus: int = 0) -> dict[str, Any] | None:
    """Container resources from the components' simple inputs; requests equal limits (Guaranteed QoS)."""
    limits: dict[str, Any] = {}
    if cpu:
        limits["cpu"] = cpu
    if memory:
        limits["memory"] = memory
    requests = dict(limits)
    if gpus:
        limits["nvidia.com/gpu"] = gpus  # GPUs are limits only in Kubernetes
    if not limits:
        return None
    return {"limits": limits, **({"requests": requests} if requests else {})}


def launch_component(
    *,
    kind: JobKind,
    run_id: str,
    task_id: str,
    image: str,
    default_image: str,
    command: Sequence[Any],
    args: Sequence[Any],
    trainer_args: Sequence[Any],
    workers: int,
    restart_policy: str,
    backoff_limit: int,
    active_deadline_seconds: int,
    clean_pod_policy: str,
    env: Mapping[str, str],
    cpu: str,
    memory: str,
    gpus: int,
    manifest: str,
    dataset_uri: str,
    model_uri: str,
    checkpoint_uri: str,
    backend: str,
    timeout_seconds: int,
    identity_path: str,
    replicas: Mapping[str, int] | None = None,
    spec: JobSpec | None = None,
    api_version: str | None = None,
) -> tuple[LaunchInputs, JobResult]:
    """The body every launch component shares: typed inputs -> job -> run; a user error or a failed
    job ends the step with a clear message and the job's exit code.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        inputs = LaunchInputs(
            kind=kind,
            name=job_name(kind.value.lower(), run_id, task_id),
            image=image or default_image,
            command=command,
            args=[*args, *trainer_args],
            workers=workers,
            replicas=dict(replicas or {}),
            restart_policy=restart_policy,
            backoff_limit=backoff_limit,
            active_deadline_seconds=active_deadline_seconds,
            clean_pod_policy=clean_pod_policy,
            env=env,
            resources=resources_of(cpu, memory, gpus),
            spec=spec or JobSpec(),
            labels={RUN_ID_LABEL: label_value(run_id), TASK_ID_LABEL: label_value(task_id)},
            api_version=api_version,
        )
        result = launch_step(
            kind=kind.value,
            inputs=inputs,
            manifest=manifest,
            dataset_uri=dataset_uri,
            model_uri=model_uri,
            checkpoint_uri=checkpoint_uri,
            backend=backend,
            timeout_seconds=timeout_seconds,
            identity_path=identity_path,
        )
    except (KftrainError, ValueError) as exc:
        fail_step(str(exc), getattr(exc, "exit_code", 1))
    return inputs, result


def fail_step(message: str, exit_code: int = 1) -> NoReturn:
    """End a pipeline step: the message in its log, the exit code as its status."""
    print(f"ERROR: {message}", file=sys.stderr)
    raise SystemExit(exit_code)

"""The launch step: a job (from a request or a manifest) tied to its run, given the platform's pod settings and
the artifact URIs, run to its end on the chosen backend.

The artifact URIs reach every replica as environment variables (``KFTRAIN_DATASET_URI``,
``KFTRAIN_MODEL_URI``, ``KFTRAIN_CHECKPOINT_URI``) and, through Kubernetes' ``$(VAR)`` expansion, in the
program's arguments, so the same manifest works on both backends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain import storage
from kftrain.backends import KubernetesConfig, LocalConfig, choose_backend, make_backend
from kftrain.backends.base import BackendConfig, JobResult
from kftrain.contract import CHECKPOINT_ENV, DATASET_ENV, MODEL_ENV
from kftrain.errors import JobFailedError, JobSpecError
from kftrain.job import EnvVar, PodSettings, TrainingJob, apply_pod_settings, load_manifest, main_container
from kftrain.job.naming import stamp_run_identity
from kftrain.job.validate import validate_job

log = logging.getLogger(__name__)

# Where the object store is: every replica must reach the same one as the step.
_STORE_ENDPOINT_VARS = ("AWS_ENDPOINT_URL", "MINIO_ENDPOINT", "AWS_REGION")


@dataclass(frozen=True)
class Artifacts:
    """The URIs a training job reads and writes."""

    dataset_uri: str
    model_uri: str
    checkpoint_uri: str = ""

    def env(self) -> dict[str, str]:
        checkpoints = self.checkpoint_uri or (
            storage.derived_uri(self.model_uri, "checkpoints") if self.model_uri else ""
        )
        values = {DATASET_ENV: self.dataset_uri, MODEL_ENV: self.model_uri, CHECKPOINT_ENV: checkpoints}
        return {k: as_written(v) for k, v in values.items() if v}


def as_written(value: str) -> str:
    """``value`` as an env value that Kubernetes' ``$(VAR)`` expansion gives back unchanged: each ``$`` escaped as
    ``$$`` (kubernetes@v1.36:third_party/forked/golang/expansion/expand.go, tryReadVariableName). A URI reaches
    every replica as the step was given it (and as the step itself reads it), whatever the container's env holds;
    the local backend expands by the same rule."""
    return value.replace("$", "$$")


def job_from_manifest(text: str, kind: str, *, runtimes: Any = None) -> TrainingJob:
    """The job a launch step of ``kind`` was given as YAML; a manifest of another kind is refused."""
    job = load_manifest(text, runtimes=runtimes)
    if job.kind != kind:
        raise JobSpecError("kind", f"this step launches a {kind}, the manifest is a {job.kind}")
    return job


def store_endpoint_env(uri: str) -> dict[str, str]:
    """The object store's endpoint as this step resolves it for ``uri``, for replicas to reach the same store.

    The step may know it from variables its own pod has and the replicas' pods lack (KFP's in-cluster MinIO
    service variables exist only in KFP's namespace), so the resolved URL is passed on explicitly.
    """
    values = {k: os.environ[k] for k in _STORE_ENDPOINT_VARS if k in os.environ}
    if uri.startswith(("s3://", "minio://", "s3a://")) and "AWS_ENDPOINT_URL" not in values:
        try:
            endpoint = storage.s3_endpoint(uri)
        except storage.StorageError:
            endpoint = None
        if endpoint:
            values["AWS_ENDPOINT_URL"] = endpoint
    for name, value in values.items():
        # The value becomes a literal env var of the job, which anyone who may read the job reads: a credential in
        # the URL would be published there. Credentials reach replicas by secretKeyRef (storage_secret) only.
        host = _host_past_userinfo(value) if name != "AWS_REGION" else None
        if host is not None:
            raise JobSpecError(
                name,
                f"the object store's endpoint (host {host}) carries credentials in its URL, which would be "
                "written into the job for every replica; give the endpoint without them and the credentials by "
                "storage_secret (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from a secret)",
            )
    return values


def _host_past_userinfo(endpoint: str) -> str | None:
    """The host of ``endpoint`` (``https://host:port``, or ``host:port`` as KFP's providers write it) when it names a
    user before it (``user:password@host``), else None. The userinfo ends at the authority's last ``@``, as Go's
    url.Parse reads it (golang/go@go1.24.0:src/net/url/url.go parseAuthority)."""
    authority = endpoint.split("://", 1)[-1].split("/", 1)[0]
    return authority.rsplit("@", 1)[1] if "@" in authority else None


def inject_artifact_env(job: TrainingJob, artifacts: Artifacts, extra: Sequence[EnvVar] = ()) -> None:
    """Put the artifact URIs (and the object store's endpoint), then ``extra``, into every replica's main
    container; a variable the container already sets keeps its value."""
    values = {**store_endpoint_env(artifacts.model_uri), **artifacts.env()}
    added = [*(EnvVar(name=k, value=v) for k, v in values.items()), *extra]
    for rtype in job.replica_specs:
        target = main_container(job, rtype)
        if target is None:
            continue
        existing = {e.name for e in target.env or []}
        target.env = [*(target.env or []), *(e for e in added if e.name not in existing)]
    validate_job(job)


def prepare_job(
    job: TrainingJob,
    *,
    artifacts: Artifacts,
    pods: PodSettings,
    task: PodSettings | None = None,
    run_id: str = "",
    task_id: str = "",
    env: Sequence[EnvVar] = (),
) -> TrainingJob:
    """``job`` as the launch step submits it: named and labelled from its run, the platform's pod settings (the
    explicit inputs, then what the launch task's own settings, ``task``, still fill in), the artifact URIs and
    ``env`` added."""
    if run_id or task_id:
        if not (run_id and task_id):
            raise JobSpecError("run_id" if not run_id else "task_id", "missing: a job is named from both ids")
        stamp_run_identity(job, run_id, task_id)
    job = apply_pod_settings(job, pods, *([task] if task is not None else []))
    inject_artifact_env(job, artifacts, env)
    return job


def backend_config(
    backend: str, *, identity_path: str | Path | None = None, pending_timeout_s: float | None = 600.0
) -> BackendConfig:
    """The config of the backend ``backend`` names (``auto``: kubernetes for a KFP task in a pod, else local)."""
    name, why = choose_backend(backend)
    log.info("backend %s (%s)", name, why)
    if name == "kubernetes":
        return KubernetesConfig(identity_path=identity_path, pending_timeout_s=pending_timeout_s)
    return LocalConfig(identity_path=identity_path)


def run_job(job: TrainingJob, config: BackendConfig, *, timeout: float | None = None) -> JobResult:
    """Run ``job`` to its end on the backend ``config`` is for; a failed job raises :class:`JobFailedError`."""
    backend = make_backend(config)
    log.info("launching %s %s on the %s backend", job.kind, job.name, backend.name)
    result = backend.run(job, timeout)
    if not result.succeeded:
        raise JobFailedError(result.describe(), exit_code=result.exit_code or 1)
    return result

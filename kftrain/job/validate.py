"""Checks a job before anything is created or started.

The CRD schemas accept any replica type name and any restart policy string; the
operators' webhooks and controllers then reject or misbehave at run time. These
checks catch those mistakes up front, each naming the field to fix.
"""

from __future__ import annotations

import re

from kftrain.errors import JobSpecError
from kftrain.job.kinds import KindSpec, kind_spec
from kftrain.job.model import JobKind, RestartPolicy, TrainingJob

# RFC 1035 label, as the operators' webhooks require: pod and service names derive from it.
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_MAX_NAME = 63
_NPROC_WORDS = {"auto", "cpu", "gpu"}
# Replica types that must be a single pod.
_SINGLETONS = {"Chief", "Master", "Launcher"}


def validate_job(job: TrainingJob) -> None:
    kspec = kind_spec(job.kind, job.api_version)
    _validate_metadata(job)
    replicas_path = f"spec.{kspec.replica_key}"
    if not job.replica_specs:
        raise JobSpecError(replicas_path, "a job needs at least one replica type")
    for rtype, rspec in job.replica_specs.items():
        path = f"{replicas_path}.{rtype}"
        if rtype not in kspec.replica_types:
            hint = next((t for t in kspec.replica_types if t.lower() == rtype.lower()), None)
            did_you_mean = f" (did you mean {hint!r}?)" if hint else ""
            raise JobSpecError(
                path,
                f"unknown replica type for {kspec.kind.value}{did_you_mean}; "
                f"expected one of: {', '.join(kspec.replica_types)}",
            )
        if rspec.count < 0:
            raise JobSpecError(f"{path}.replicas", f"must be >= 0, got {rspec.count}")
        if rtype in _SINGLETONS and rspec.count > 1:
            raise JobSpecError(f"{path}.replicas", f"a {rtype} must have exactly 1 replica, got {rspec.count}")
        _validate_containers(kspec, job, rtype, path)
        if rspec.restart_policy == RestartPolicy.EXIT_CODE and job.run_policy.backoff_limit is None:
            raise JobSpecError(
                "spec.runPolicy.backoffLimit",
                f"{path}.restartPolicy is ExitCode, which restarts failed pods; set a backoffLimit "
                "so a replica that keeps failing ends the job instead of restarting forever",
            )
    _validate_run_policy(job)
    if job.kind == JobKind.PYTORCHJOB:
        _validate_pytorch(job, replicas_path)
    elif job.kind == JobKind.MPIJOB:
        _validate_mpi(job, replicas_path)
    elif job.kind == JobKind.TFJOB:
        _validate_tf(job, replicas_path)


def _validate_metadata(job: TrainingJob) -> None:
    name = job.metadata.name
    if not name and not job.metadata.generate_name:
        raise JobSpecError("metadata.name", "missing (or set metadata.generateName)")
    if name and (len(name) > _MAX_NAME or not _NAME_RE.match(name)):
        raise JobSpecError(
            "metadata.name",
            f"{name!r} must be lower-case letters, digits and '-', start with a letter, end alphanumeric, "
            f"at most {_MAX_NAME} characters (the operator names pods and services after it)",
        )


def _validate_containers(kspec: KindSpec, job: TrainingJob, rtype: str, path: str) -> None:
    containers = job.replica_specs[rtype].template.spec.containers
    cpath = f"{path}.template.spec.containers"
    if not containers:
        raise JobSpecError(cpath, "missing: every replica needs a container")
    names = [c.name for c in containers]
    for i, container in enumerate(containers):
        if not container.name:
            raise JobSpecError(f"{cpath}[{i}].name", "missing")
        for j, env in enumerate(container.env or []):
            if not env.name:
                raise JobSpecError(f"{cpath}[{i}].env[{j}].name", "missing")
    main = main_container_name(job)
    if main is not None and main not in names:
        raise JobSpecError(
            cpath,
            f"no container named {main!r}; {kspec.kind.value} injects its environment into the container "
            f"of that name (found: {', '.join(names)})",
        )


def main_container_name(job: TrainingJob) -> str | None:
    """Name of the container the operator treats as the replica's program, None for the first."""
    if job.spec.main_container:
        return job.spec.main_container
    return kind_spec(job.kind, job.api_version).default_container


def _validate_run_policy(job: TrainingJob) -> None:
    rp = job.run_policy
    for attr, key in (
        ("backoff_limit", "backoffLimit"),
        ("active_deadline_seconds", "activeDeadlineSeconds"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    ):
        value = getattr(rp, attr)
        if value is not None and value < 0:
            raise JobSpecError(f"spec.runPolicy.{key}", f"must be >= 0, got {value}")
    if rp.active_deadline_seconds == 0:
        raise JobSpecError("spec.runPolicy.activeDeadlineSeconds", "must be > 0 when set")


def _validate_pytorch(job: TrainingJob, path: str) -> None:
    elastic = job.spec.elastic_policy
    if "Master" not in job.replica_specs and elastic is None:
        raise JobSpecError(
            f"{path}.Master",
            "missing: without an elasticPolicy the operator sets MASTER_ADDR, RANK and WORLD_SIZE "
            "only when the job has a Master replica",
        )
    if "Master" in job.replica_specs and job.replicas_of("Master") != 1:
        raise JobSpecError(f"{path}.Master.replicas", "a PyTorchJob has exactly 1 Master")
    nproc = job.spec.nproc_per_node
    if nproc is not None and nproc not in _NPROC_WORDS and not (nproc.isdigit() and int(nproc) > 0):
        raise JobSpecError("spec.nprocPerNode", f"{nproc!r} must be auto, cpu, gpu or a positive integer")
    if elastic is not None:
        if job.replicas_of("Worker") < 1:
            raise JobSpecError(f"{path}.Worker", "an elasticPolicy needs a Worker replica spec with replicas >= 1")
        if elastic.n_proc_per_node is not None and nproc is not None:
            raise JobSpecError("spec.elasticPolicy.nProcPerNode", "must not be set together with spec.nprocPerNode")
        lo, hi = elastic.min_replicas, elastic.max_replicas
        if lo is not None and lo < 1:
            raise JobSpecError("spec.elasticPolicy.minReplicas", f"must be >= 1, got {lo}")
        if lo is not None and hi is not None and lo > hi:
            raise JobSpecError("spec.elasticPolicy.maxReplicas", f"must be >= minReplicas ({lo}), got {hi}")
        if elastic.max_restarts is not None and elastic.max_restarts < 0:
            raise JobSpecError("spec.elasticPolicy.maxRestarts", f"must be >= 0, got {elastic.max_restarts}")


def _validate_mpi(job: TrainingJob, path: str) -> None:
    if "Launcher" not in job.replica_specs:
        raise JobSpecError(f"{path}.Launcher", "missing: an MPIJob runs mpirun from its Launcher replica")
    if job.replicas_of("Launcher") != 1:
        raise JobSpecError(f"{path}.Launcher.replicas", "an MPIJob needs exactly 1 Launcher")
    slots = job.spec.slots_per_worker
    if slots is not None and slots < 1:
        raise JobSpecError("spec.slotsPerWorker", f"must be >= 1, got {slots}")
    if job.replicas_of("Worker") == 0 and not job.spec.run_launcher_as_worker:
        raise JobSpecError(f"{path}.Worker", "an MPIJob needs at least 1 Worker (or runLauncherAsWorker: true)")


def _validate_tf(job: TrainingJob, path: str) -> None:
    if "Chief" in job.replica_specs and "Master" in job.replica_specs:
        raise JobSpecError(path, "a TFJob has either a Chief or a Master, not both")
    policy = job.spec.success_policy
    if policy not in (None, "", "AllWorkers"):
        raise JobSpecError("spec.successPolicy", f"{policy!r} must be empty or AllWorkers")

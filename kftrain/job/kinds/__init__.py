"""The job kinds, one module each, and the registry that finds a job's :class:`Kind`.

``kind_of(job)`` (or ``kind_for(kind, api_version)`` where only the names are at hand) is the one way
code reaches kind-specific facts and behaviour; nothing else tests ``job.kind``.
"""

from __future__ import annotations

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import GROUP, Kind, KindSpec
from kftrain.job.kinds.mpijob import MPIJOB_V1, MPIJOB_V2BETA1
from kftrain.job.kinds.pytorchjob import PYTORCHJOB
from kftrain.job.kinds.tfjob import TFJOB
from kftrain.job.kinds.trainjob import TRAINJOB
from kftrain.job.model import Container, JobKind, TrainingJob

KINDS: tuple[Kind, ...] = (TFJOB, PYTORCHJOB, MPIJOB_V2BETA1, MPIJOB_V1, TRAINJOB)

# The version rendered when a job is built without one: mpi-operator's v2beta1 for MPIJob.
DEFAULT_API_VERSION = {
    JobKind.TFJOB: TFJOB.spec.api_version,
    JobKind.PYTORCHJOB: PYTORCHJOB.spec.api_version,
    JobKind.MPIJOB: MPIJOB_V2BETA1.spec.api_version,
    JobKind.TRAINJOB: TRAINJOB.spec.api_version,
}


def kind_for(kind: JobKind | str, api_version: str | None = None) -> Kind:
    """The :class:`Kind` of ``kind`` at ``api_version`` (its default version when None)."""
    try:
        job_kind = JobKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in JobKind)
        raise JobSpecError("kind", f"unknown kind {kind!r}; expected one of: {allowed}") from None
    version = api_version or DEFAULT_API_VERSION[job_kind]
    for candidate in KINDS:
        if candidate.spec.kind == job_kind and candidate.spec.api_version == version:
            return candidate
    allowed = ", ".join(k.spec.api_version for k in KINDS if k.spec.kind == job_kind)
    raise JobSpecError("apiVersion", f"{version!r} is not served for {job_kind.value}; expected one of: {allowed}")


def kind_of(job: TrainingJob) -> Kind:
    return kind_for(job.kind, job.api_version)


def main_container(job: TrainingJob, replica_type: str) -> Container | None:
    """The container of ``replica_type`` the operator treats as its program (by name, else the first)."""
    containers = job.replica_specs[replica_type].template.spec.containers
    name = kind_of(job).main_container_name(job, replica_type)
    return next((c for c in containers if c.name == name), containers[0] if containers else None)


__all__ = ["DEFAULT_API_VERSION", "GROUP", "KINDS", "Kind", "KindSpec", "kind_for", "kind_of", "main_container"]

"""The registry of job kinds: the one list of the kinds and versions this release runs, and the way every other
module reaches a job's :class:`~kftrain.job.kinds.base.Kind`.

Each kind's versions are registered in the order of preference: the first is the one a job built without an
``apiVersion`` gets, and the one rendered where a cluster serves several (mpi-operator's ``v2beta1`` before the
training-operator's ``v1`` for MPIJob).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import Kind
from kftrain.job.model import Container, TrainingJob


class KindRegistry:
    """Kinds by name and API version."""

    def __init__(self, kinds: Iterable[Kind]) -> None:
        self._kinds = tuple(kinds)

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._kinds)

    def names(self) -> list[str]:
        """Every kind's name, once, in registration order."""
        return list(dict.fromkeys(k.spec.kind for k in self._kinds))

    def versions(self, kind: str) -> list[Kind]:
        """Every registered version of ``kind``, the preferred first."""
        return [k for k in self._kinds if k.spec.kind == kind]

    def get(self, kind: str, api_version: str | None = None) -> Kind:
        """The :class:`Kind` of ``kind`` at ``api_version`` (its preferred version when None)."""
        versions = self.versions(str(kind))
        if not versions:
            raise JobSpecError("kind", f"unknown kind {kind!r}; expected one of: {', '.join(self.names())}")
        if api_version is None:
            return versions[0]
        for candidate in versions:
            if candidate.spec.api_version == api_version:
                return candidate
        allowed = ", ".join(k.spec.api_version for k in versions)
        raise JobSpecError("apiVersion", f"{api_version!r} is not served for {kind}; expected one of: {allowed}")

    def of(self, job: TrainingJob) -> Kind:
        return self.get(job.kind, job.api_version)

    def preferred(self, kind: str, served: Sequence[str]) -> Kind:
        """The preferred version of ``kind`` among the ``served`` API versions (``group/version``) of a cluster."""
        for candidate in self.versions(kind):
            if candidate.spec.api_version in served:
                return candidate
        looked = ", ".join(f"{k.spec.plural} in {k.spec.api_version}" for k in self.versions(kind))
        raise JobSpecError("apiVersion", f"no {kind} CRD is served by this cluster (looked for {looked})")


def _registered() -> KindRegistry:
    from kftrain.job.kinds.mpijob import MPIJOB_V1, MPIJOB_V2BETA1
    from kftrain.job.kinds.pytorchjob import PYTORCHJOB
    from kftrain.job.kinds.tfjob import TFJOB
    from kftrain.job.kinds.trainjob import TRAINJOB

    return KindRegistry((TFJOB, PYTORCHJOB, MPIJOB_V2BETA1, MPIJOB_V1, TRAINJOB))


KINDS = _registered()


def kind_for(kind: str, api_version: str | None = None) -> Kind:
    """The :class:`Kind` of ``kind`` at ``api_version`` (its preferred version when None)."""
    return KINDS.get(kind, api_version)


def kind_of(job: TrainingJob) -> Kind:
    return KINDS.of(job)


def main_container(job: TrainingJob, replica_type: str) -> Container | None:
    """The container of ``replica_type`` the operator treats as its program (by name, else the first)."""
    return kind_of(job).main_container(job, replica_type)

"""What differs between the job kinds, declared once as data.

Everything kind-specific that is static (API group and version, plural, the key of
the replica specs, the replica types, the container the operator treats as the
main one, which spec fields exist) lives in one table. Behaviour that differs
(the environment the operator injects) lives in :mod:`kftrain.operator_env`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.errors import JobSpecError
from kftrain.job.model import JobKind

GROUP = "kubeflow.org"

_COMMON_SPEC_FIELDS = frozenset({"run_policy"})


@dataclass(frozen=True)
class KindSpec:
    kind: JobKind
    api_version: str
    plural: str
    replica_key: str
    replica_types: tuple[str, ...]
    # The container the operator injects its contract into; None means "the first one".
    default_container: str | None
    spec_fields: frozenset[str]
    # Port the operator exposes for rendezvous, and the container port name it looks for.
    default_port: int | None = None
    port_name: str | None = None

    @property
    def version(self) -> str:
        return self.api_version.split("/", 1)[1]


KIND_SPECS: tuple[KindSpec, ...] = (
    KindSpec(
        kind=JobKind.TFJOB,
        api_version=f"{GROUP}/v1",
        plural="tfjobs",
        replica_key="tfReplicaSpecs",
        replica_types=("Chief", "Master", "PS", "Worker", "Evaluator"),
        default_container="tensorflow",
        spec_fields=_COMMON_SPEC_FIELDS | {"success_policy", "enable_dynamic_worker"},
        default_port=2222,
        port_name="tfjob-port",
    ),
    KindSpec(
        kind=JobKind.PYTORCHJOB,
        api_version=f"{GROUP}/v1",
        plural="pytorchjobs",
        replica_key="pytorchReplicaSpecs",
        replica_types=("Master", "Worker"),
        default_container="pytorch",
        spec_fields=_COMMON_SPEC_FIELDS | {"elastic_policy", "nproc_per_node"},
        default_port=23456,
        port_name="pytorchjob-port",
    ),
    KindSpec(
        kind=JobKind.MPIJOB,
        api_version=f"{GROUP}/v2beta1",
        plural="mpijobs",
        replica_key="mpiReplicaSpecs",
        replica_types=("Launcher", "Worker"),
        default_container=None,
        spec_fields=_COMMON_SPEC_FIELDS
        | {
            "slots_per_worker",
            "ssh_auth_mount_path",
            "launcher_creation_policy",
            "run_launcher_as_worker",
            "mpi_implementation",
        },
    ),
    KindSpec(
        kind=JobKind.MPIJOB,
        api_version=f"{GROUP}/v1",
        plural="mpijobs",
        replica_key="mpiReplicaSpecs",
        replica_types=("Launcher", "Worker"),
        default_container="mpi",
        spec_fields=_COMMON_SPEC_FIELDS | {"slots_per_worker", "main_container", "clean_pod_policy"},
    ),
)

# The version rendered when a job is built without one: mpi-operator's v2beta1 for MPIJob.
DEFAULT_API_VERSION = {
    JobKind.TFJOB: f"{GROUP}/v1",
    JobKind.PYTORCHJOB: f"{GROUP}/v1",
    JobKind.MPIJOB: f"{GROUP}/v2beta1",
}


def kind_spec(kind: JobKind | str, api_version: str | None = None) -> KindSpec:
    """The spec of ``kind`` at ``api_version`` (its default version when None)."""
    try:
        job_kind = JobKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in JobKind)
        raise JobSpecError("kind", f"unknown kind {kind!r}; expected one of: {allowed}") from None
    version = api_version or DEFAULT_API_VERSION[job_kind]
    for spec in KIND_SPECS:
        if spec.kind == job_kind and spec.api_version == version:
            return spec
    allowed = ", ".join(s.api_version for s in KIND_SPECS if s.kind == job_kind)
    raise JobSpecError("apiVersion", f"{version!r} is not served for {job_kind.value}; expected one of: {allowed}")

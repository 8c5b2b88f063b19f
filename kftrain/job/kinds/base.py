"""What a job kind is: its static facts (:class:`KindSpec`) and its behaviour (:class:`Kind`).

Every place that treats the kinds differently asks the job's :class:`Kind` instead of testing
``job.kind``: which replica types exist and which must be single, the container the operator treats as
the program, the webhooks' extra rules, which replica types the launch inputs fill, the environment and
files the operator gives each replica, which replicas run a program on one machine and which need a
port, the default restart policy, when the job has succeeded, whether a lost replica ends it, whether a
replica type may hold GPUs, and conversion between API versions. One subclass per kind (per version
where versions behave differently) lives in this package, one module per kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.model import JobKind, RestartPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology, all_replicas

GROUP = "kubeflow.org"


@dataclass(frozen=True)
class KindSpec:
    """The static facts of one kind at one API version, as the CRD and the operator define them."""

    kind: JobKind
    api_version: str
    plural: str
    replica_key: str
    # Every replica type the operator knows, in its canonical order (the order manifests are rendered in).
    replica_types: tuple[str, ...]
    # Replica types that must be a single pod.
    singletons: frozenset[str]
    # The container the operator injects its contract into; None means "the first one".
    default_container: str | None
    # The name a job built from inputs gives its one container (the operator's conventional name).
    container_name: str
    # The attribute names of JobSpec this kind accepts (see kftrain.job.model.JobSpec).
    spec_fields: frozenset[str]
    # Replica types the launch inputs always create, one each (the PyTorchJob Master, the MPIJob Launcher).
    fixed_replicas: tuple[str, ...] = ()
    # Whether the Workers run the job's program; MPIJob Workers only host the ranks mpirun starts.
    workers_run_program: bool = True
    # The API group serving the kind, and the label its controller puts on every pod with the job's name.
    group: str = GROUP
    pod_job_label: str = "training.kubeflow.org/job-name"
    # Where the manifest says the job is suspended (what Kueue sets and clears).
    suspend_field: str = "spec.runPolicy.suspend"

    @property
    def version(self) -> str:
        return self.api_version.split("/", 1)[1]


@dataclass(frozen=True)
class MountedFile:
    """A file the operator mounts into a replica's pod (from a ConfigMap), with its mode."""

    content: str
    mode: int = 0o444


def is_retryable_exit_code(code: int) -> bool:
    """The ExitCode restart policy: 128-255 (killed by a signal: 137 is an OOM kill or a preemption) are
    retried, 1-127 (the program's own failure) are not. A negative code is Python's "killed by signal N"."""
    return code >= 128 or code < 0


@dataclass(frozen=True)
class ClusterObject:
    """A custom object a job depends on: where the API serves it, and ``check`` to run on what it serves."""

    group: str
    version: str
    kind: str
    plural: str
    name: str
    namespaced: bool
    # Raises a JobSpecError when the object served does not fit the job as it was built.
    check: Callable[[Mapping[str, Any]], None]


class Kind:
    """The behaviour of one kind; the defaults are what the operators share."""

    def __init__(self, spec: KindSpec) -> None:
        self.spec = spec

    def __repr__(self) -> str:
        return f"<Kind {self.spec.kind.value} {self.spec.api_version}>"

    # -- the manifest ------------------------------------------------------------------------------

    def main_container_name(self, job: TrainingJob, replica_type: str) -> str | None:
        """The container of ``replica_type`` that runs the replica's program; None: the first one."""
        return self.spec.default_container

    def validate(self, job: TrainingJob) -> None:
        """The kind's own rules, beyond what every kind checks (kftrain.job.validate)."""

    def replica_types(self, job: TrainingJob) -> tuple[str, ...]:
        """The replica types ``job`` may have: the kind's fixed set (a TrainJob's come from its runtime)."""
        return self.spec.replica_types

    def load(self, data: Mapping[str, Any], *, runtimes: Any = None) -> TrainingJob | None:
        """``data`` as a job when the kind has its own manifest shape; None: the operators' replica-spec shape."""
        return None

    def render(self, job: TrainingJob) -> dict[str, Any] | None:
        """The manifest of ``job`` when the kind has its own shape; None: the operators' replica-spec shape."""
        return None

    def replicas_path(self) -> str:
        return f"spec.{self.spec.replica_key}"

    def summary(self, job: TrainingJob) -> dict[str, object]:
        """Facts of ``job`` worth showing beside its name (MPIJob: its slots)."""
        return {}

    def cluster_dependency(self, job: TrainingJob) -> ClusterObject | None:
        """An object the cluster must already hold for the job to run (a TrainJob's runtime); None: nothing."""
        return None

    def convert(self, job: TrainingJob, api_version: str) -> TrainingJob:
        """``job`` rendered for ``api_version`` of the same kind."""
        if api_version != job.api_version:
            raise JobSpecError("apiVersion", f"{job.kind.value} cannot be converted to {api_version}")
        return job

    # -- the operator's contract for each replica ---------------------------------------------------

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        """The variables the operator appends to the replica's main container, in the operator's order."""
        raise NotImplementedError

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        """Files the operator mounts into the pods, by absolute path (the MPI hostfile)."""
        return {}

    def membership_files(
        self, job: TrainingJob, topology: Topology, running: Sequence[ReplicaId]
    ) -> dict[str, MountedFile]:
        """Mounted files the operator rewrites as Worker pods start and stop, for the ``running`` Workers (a v1
        MPIJob's ``discover_hosts.sh``); :meth:`operator_files` includes them as they are at the start."""
        return {}

    def local_host_name(self, replica: ReplicaId, topology: Topology) -> str:
        """The name this machine goes by, for ``replica``, in the files the operator mounts here."""
        return topology.host

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        """The operator's restart policy for a replica spec that leaves it unset."""
        return RestartPolicy.NEVER

    def restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        """The restart policy replicas of ``replica_type`` run under: their spec's, else the operator's default."""
        return job.replica_specs[replica_type].restart_policy or self.default_restart_policy(job, replica_type)

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        """Whether the replicas that exited successfully complete the job, per the kind's success rule."""
        raise NotImplementedError

    def survives_loss(self, job: TrainingJob, replica: ReplicaId, workers_left: int) -> bool:
        """Whether the job goes on when ``replica`` has failed for good and ``workers_left`` Workers still run."""
        return False

    def hosts_training(self, job: TrainingJob, replica_type: str) -> bool:
        """Whether replicas of this type run training processes, and so get GPUs and a large /dev/shm (an MPI
        launcher that only runs mpirun does not)."""
        return True

    # -- running the replicas on one machine ------------------------------------------------------

    def process_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        """The replicas that run a program of their own."""
        return all_replicas(job)

    def replicas_with_ports(self, job: TrainingJob) -> list[ReplicaId]:
        """The replicas others connect to, which need a port of their own on one machine."""
        return []

    def adapt_local_env(self, job: TrainingJob, replica: ReplicaId, env: dict[str, str]) -> None:
        """Adjust ``env`` for a replica that runs as a process on this machine rather than in its own pod."""

"""Typed launch requests: what a launch component's inputs ask for, checked before anything is created.

A :class:`LaunchRequest` holds what every kind takes (image, program, workers, run policy, env, pod
settings) and the kind's own options (:class:`PyTorchJobOptions`, :class:`TFJobOptions`,
:class:`MPIJobOptions`), each with the rules only the compiled components used to carry. ``to_job``
lays the replicas out as the kind declares (:class:`kftrain.job.kinds.KindSpec`: the fixed single
replicas, whether Workers run the program) and builds a validated job.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kftrain.errors import JobSpecError
from kftrain.job import (
    CleanPodPolicy,
    JobKind,
    JobSpec,
    PodSettings,
    ReplicaInput,
    RestartPolicy,
    RunPolicy,
    TrainingJob,
    build_job,
    kind_for,
)
from kftrain.job.kinds.mpijob import V1 as MPI_V1
from kftrain.job.model import LauncherCreationPolicy, MPIImplementation

_WHOLE_FLOAT = re.compile(r"^-?\d+\.0$")
E = TypeVar("E", bound=enum.Enum)


def _enum(enum_type: type[E], value: str, field_name: str) -> E:
    """``value`` as a member of ``enum_type``, or an error naming the input and the allowed values."""
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_type)
        raise JobSpecError(field_name, f"{value!r} is not one of: {allowed}") from None


@dataclass
class KindOptions:
    """The inputs one kind adds; the base is a kind with none."""

    api_version: str | None = None

    def validate(self) -> None:
        """Refuse values the operator would reject or misread, naming the input."""

    def extra_replicas(self) -> dict[str, int]:
        """Replica types beyond the kind's fixed ones and the Workers (TFJob: Chief, PS, Evaluator)."""
        return {}

    def spec(self) -> JobSpec:
        return JobSpec()

    def build(self, request: LaunchRequest, name: str) -> TrainingJob | None:
        """The job, when the kind is not laid out as replica specs (a TrainJob); None: the replica layout."""
        return None


@dataclass
class TrainJobOptions(KindOptions):
    """A Kubeflow Trainer v2 TrainJob: the runtime it runs on, its nodes, and processes per node."""

    runtime: str = "torch-distributed"
    num_nodes: int = 2
    num_proc_per_node: int = 1

    def validate(self) -> None:
        if not self.runtime:
            raise JobSpecError("runtime", "missing: the ClusterTrainingRuntime to run on")
        if self.num_nodes < 1:
            raise JobSpecError("num_nodes", f"must be >= 1, got {self.num_nodes}")
        if self.num_proc_per_node < 0:
            raise JobSpecError(
                "num_proc_per_node", f"must be >= 0 (0: the runtime decides), got {self.num_proc_per_node}"
            )

    def build(self, request: LaunchRequest, name: str) -> TrainingJob | None:
        from kftrain.job import load_manifest
        from kftrain.job.trainer_runtime import API_VERSION

        trainer: dict[str, object] = {"numNodes": self.num_nodes}
        if self.num_proc_per_node:
            trainer["numProcPerNode"] = self.num_proc_per_node
        if request.image:
            trainer["image"] = request.image
        trainer["command"] = [command_line_value(a) for a in request.command]
        if request.args:
            trainer["args"] = [command_line_value(a) for a in request.args]
        if request.env:
            trainer["env"] = [{"name": k, "value": str(v)} for k, v in request.env.items()]
        spec: dict[str, object] = {"runtimeRef": {"name": self.runtime}, "trainer": trainer}
        if request.active_deadline_seconds:
            spec["activeDeadlineSeconds"] = request.active_deadline_seconds
        return load_manifest({"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": {"name": name}, "spec": spec})


@dataclass
class PyTorchJobOptions(KindOptions):
    nproc_per_node: str = "1"

    def spec(self) -> JobSpec:
        return JobSpec(nproc_per_node=self.nproc_per_node)


@dataclass
class TFJobOptions(KindOptions):
    chief: int = 0
    ps: int = 0
    evaluator: int = 0

    def validate(self) -> None:
        for name, value in (("chief", self.chief), ("evaluator", self.evaluator)):
            if value not in (0, 1):
                raise JobSpecError(name, f"must be 0 or 1, got {value}")
        if self.ps < 0:
            raise JobSpecError("ps", f"must be >= 0, got {self.ps}")
        if self.ps and not self.chief:
            raise JobSpecError("chief", "ParameterServerStrategy needs a chief (the coordinator) when ps > 0")

    def extra_replicas(self) -> dict[str, int]:
        return {"Chief": self.chief, "PS": self.ps, "Evaluator": self.evaluator}


@dataclass
class MPIJobOptions(KindOptions):
    slots_per_worker: int = 1
    launcher_creation_policy: str = ""
    run_launcher_as_worker: bool = False
    ssh_auth_mount_path: str = ""
    mpi_implementation: str = ""

    def validate(self) -> None:
        kind_for(JobKind.MPIJOB, self.api_version)  # refuses a version no operator serves
        v2_only = {
            "launcher_creation_policy": self.launcher_creation_policy,
            "run_launcher_as_worker": self.run_launcher_as_worker,
            "ssh_auth_mount_path": self.ssh_auth_mount_path,
            "mpi_implementation": self.mpi_implementation,
        }
        given = [name for name, value in v2_only.items() if value]
        if self.api_version == MPI_V1 and given:
            raise JobSpecError(given[0], f"not a field of MPIJob {MPI_V1} (only kubeflow.org/v2beta1 has it)")
        self.spec()  # the enumerations

    def spec(self) -> JobSpec:
        return JobSpec(
            slots_per_worker=self.slots_per_worker,
            launcher_creation_policy=(
                _enum(LauncherCreationPolicy, self.launcher_creation_policy, "launcher_creation_policy")
                if self.launcher_creation_policy
                else None
            ),
            run_launcher_as_worker=True if self.run_launcher_as_worker else None,
            ssh_auth_mount_path=self.ssh_auth_mount_path or None,
            mpi_implementation=(
                _enum(MPIImplementation, self.mpi_implementation, "mpi_implementation")
                if self.mpi_implementation
                else None
            ),
        )

    def slots(self, workers: int) -> int:
        return (workers + (1 if self.run_launcher_as_worker else 0)) * self.slots_per_worker


OPTIONS_OF_KIND: dict[JobKind, type[KindOptions]] = {
    JobKind.PYTORCHJOB: PyTorchJobOptions,
    JobKind.TFJOB: TFJobOptions,
    JobKind.MPIJOB: MPIJobOptions,
    JobKind.TRAINJOB: TrainJobOptions,
}


def command_line_value(value: object) -> str:
    """A list item from a pipeline as a command-line string.

    Pipeline parameters travel as protobuf numbers (doubles), so an int parameter placed in a list
    arrives as ``10.0`` (or the string ``"10.0"`` once interpolated); programs expect ``10``.
    """
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text[:-2] if _WHOLE_FLOAT.match(text) else text


@dataclass
class LaunchRequest:
    """The typed inputs of a launch component, shared by every kind, and the kind's own options."""

    kind: JobKind
    image: str
    command: Sequence[str]
    args: Sequence[str] = ()
    workers: int = 1
    restart_policy: str = "OnFailure"
    backoff_limit: int | None = 3
    active_deadline_seconds: int | None = None
    clean_pod_policy: str = "Running"
    env: Mapping[str, str] = field(default_factory=dict)
    pods: PodSettings = field(default_factory=PodSettings)
    options: KindOptions = field(default_factory=KindOptions)

    def validate(self) -> None:
        if self.workers < 0:
            raise JobSpecError("workers", f"must be >= 0, got {self.workers}")
        _enum(RestartPolicy, self.restart_policy, "restart_policy")
        _enum(CleanPodPolicy, self.clean_pod_policy, "clean_pod_policy")
        self.options.validate()

    def to_job(self, name: str | None = None) -> TrainingJob:
        """The validated job this request describes, named ``name`` (default: the kind in lower case)."""
        self.validate()
        built = self.options.build(self, name or self.kind.value.lower())
        if built is not None:
            return built
        kind = kind_for(self.kind, self.options.api_version).spec
        command = [command_line_value(a) for a in self.command]
        args = [command_line_value(a) for a in self.args]
        policy = RestartPolicy(self.restart_policy)

        def running(count: int) -> ReplicaInput:
            return ReplicaInput(count, command=command, args=args, restart_policy=policy)

        replicas = {rtype: running(1) for rtype in kind.fixed_replicas}
        replicas.update({rtype: running(count) for rtype, count in self.options.extra_replicas().items() if count})
        if not kind.workers_run_program:
            replicas["Worker"] = ReplicaInput(self.workers, restart_policy=policy)
        elif self.workers:
            replicas["Worker"] = running(self.workers)
        spec = self.options.spec()
        spec.run_policy = RunPolicy(
            clean_pod_policy=CleanPodPolicy(self.clean_pod_policy),
            backoff_limit=self.backoff_limit,
            active_deadline_seconds=self.active_deadline_seconds or None,
        )
        return build_job(
            self.kind,
            name or self.kind.value.lower(),
            replicas,
            image=self.image,
            env=self.env,
            spec=spec,
            api_version=kind.api_version,
        )

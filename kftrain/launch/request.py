"""Typed launch requests: what a launch component's inputs ask for, checked before anything is created.

A :class:`LaunchRequest` holds what every kind takes (image, program, workers, run policy, env, pod
settings) and the kind's own options (:class:`PyTorchJobOptions`, :class:`TFJobOptions`,
:class:`MPIJobOptions`), each with the rules only the compiled components used to carry. ``to_job``
lays the replicas out as the kind declares (:class:`kftrain.job.kinds.KindSpec`: the fixed single
replicas, whether Workers run the program), as the options adjust it (an elastic PyTorchJob has Workers only),
and builds a validated job.
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
from kftrain.job.model import ElasticPolicy, LauncherCreationPolicy, MPIImplementation, RdzvConf

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

    def validate_workers(self, workers: int) -> None:
        """Refuse a Worker count these options cannot start with, naming the input."""

    def extra_replicas(self) -> dict[str, int]:
        """Replica types beyond the kind's fixed ones and the Workers (TFJob: Chief, PS, Evaluator)."""
        return {}

    def fixed_replicas(self, declared: tuple[str, ...]) -> tuple[str, ...]:
        """The kind's single replicas this job has (the kind declares them; an elastic PyTorchJob has none)."""
        return declared

    @property
    def elastic(self) -> bool:
        """Whether the job changes size while it runs (its replicas then run under an elastic launcher)."""
        return False

    @property
    def per_replica_launcher(self) -> bool:
        """Whether this release's trainer runs under a launcher in each replica (elastic, or several processes)."""
        return self.elastic

    def default_env(self) -> dict[str, str]:
        """Variables every replica gets unless the request's env sets them."""
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


# The rendezvous backends torchrun knows (torch.distributed.elastic.rendezvous).
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2", "static")


@dataclass
class PyTorchJobOptions(KindOptions):
    """``nproc_per_node`` processes per replica (one unless asked: the operator's default, auto, is one per core
    or GPU); elastic between ``elastic_min_workers`` and ``elastic_max_workers`` Workers when the maximum is
    set: the operator's ``elasticPolicy``, with the rendezvous backend and its settings (``rdzvConf``, e.g.
    ``join_timeout``, ``last_call_timeout``), the restarts torchrun allows, and an HPA's ``metrics``."""

    nproc_per_node: str = "1"
    elastic_min_workers: int = 0
    elastic_max_workers: int = 0
    elastic_max_restarts: int = 3
    elastic_rdzv_backend: str = "c10d"
    elastic_rdzv_conf: Mapping[str, object] = field(default_factory=dict)
    elastic_metrics: Sequence[Mapping[str, object]] = ()

    @property
    def elastic(self) -> bool:
        return self.elastic_max_workers > 0

    @property
    def per_replica_launcher(self) -> bool:
        # python alone is one process: WORLD_SIZE counts nprocPerNode per replica, torchrun starts them.
        return self.elastic or self.nproc_per_node != "1"

    def validate(self) -> None:
        if not self.elastic:
            given = [n for n, v in (("elastic_min_workers", self.elastic_min_workers),
                                    ("elastic_rdzv_conf", self.elastic_rdzv_conf),
                                    ("elastic_metrics", self.elastic_metrics)) if v]  # fmt: skip
            if given or self.elastic_max_workers < 0:
                raise JobSpecError(
                    "elastic_max_workers", f"must be >= 1 for an elastic job ({', '.join(given) or 'it'} is set)"
                )
            return
        low = self.elastic_min_workers or 1
        if low < 1:
            raise JobSpecError("elastic_min_workers", f"must be >= 1, got {low}")
        if low > self.elastic_max_workers:
            raise JobSpecError(
                "elastic_max_workers", f"must be >= elastic_min_workers ({low}), got {self.elastic_max_workers}"
            )
        if self.elastic_max_restarts < 0:
            raise JobSpecError("elastic_max_restarts", f"must be >= 0, got {self.elastic_max_restarts}")
        if self.elastic_rdzv_backend not in RDZV_BACKENDS:
            raise JobSpecError(
                "elastic_rdzv_backend", f"{self.elastic_rdzv_backend!r} is not one of: {', '.join(RDZV_BACKENDS)}"
            )
        for key in self.elastic_rdzv_conf:
            if not str(key) or "=" in str(key) or "," in str(key):
                raise JobSpecError("elastic_rdzv_conf", f"{key!r} is not a rendezvous setting name")
        for i, metric in enumerate(self.elastic_metrics):
            if not isinstance(metric, Mapping) or not metric.get("type"):
                raise JobSpecError(f"elastic_metrics[{i}]", "must be an autoscaling/v2 MetricSpec with a type")

    def validate_workers(self, workers: int) -> None:
        low, high = self.elastic_min_workers or 1, self.elastic_max_workers
        if self.elastic and not low <= workers <= high:
            raise JobSpecError(
                "workers",
                f"must be between elastic_min_workers ({low}) and elastic_max_workers ({high}), got {workers}",
            )

    def fixed_replicas(self, declared: tuple[str, ...]) -> tuple[str, ...]:
        # Elastic: Workers only, as the operator's elastic examples; the rendezvous replaces the Master.
        return () if self.elastic else declared

    def default_env(self) -> dict[str, str]:
        # A fresh worker store per rendezvous round: agents whose restart counts diverged after a lost worker
        # otherwise keep meeting stale peer addresses in the store shared with the workers.
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if self.elastic else {}

    def spec(self) -> JobSpec:
        elastic = None
        if self.elastic:
            elastic = ElasticPolicy(
                min_replicas=self.elastic_min_workers or 1,
                max_replicas=self.elastic_max_workers,
                max_restarts=self.elastic_max_restarts,
                rdzv_backend=self.elastic_rdzv_backend,
                rdzv_conf=[RdzvConf(key=str(k), value=str(v)) for k, v in self.elastic_rdzv_conf.items()] or None,
                metrics=[dict(m) for m in self.elastic_metrics] or None,
            )
        return JobSpec(nproc_per_node=self.nproc_per_node, elastic_policy=elastic)


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
        self.options.validate_workers(self.workers)

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

        replicas = {rtype: running(1) for rtype in self.options.fixed_replicas(kind.fixed_replicas)}
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
            env={**self.options.default_env(), **self.env},
            spec=spec,
            api_version=kind.api_version,
        )

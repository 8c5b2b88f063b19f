"""The typed model of a distributed training job: one model for TFJob, PyTorchJob and MPIJob.

Field names follow the Kubernetes JSON names (declared with ``json_field``) so the
mapping to manifests is mechanical. Fields the model does not type are kept in
``extra`` and rendered back untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kftrain.compat import StrEnum
from kftrain.job.serde import INT32, extra_field, json_field


class JobKind(StrEnum):
    TFJOB = "TFJob"
    PYTORCHJOB = "PyTorchJob"
    MPIJOB = "MPIJob"
    TRAINJOB = "TrainJob"  # Kubeflow Trainer v2 (trainer.kubeflow.org)


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class MPIImplementation(StrEnum):
    OPENMPI = "OpenMPI"
    INTEL = "Intel"
    MPICH = "MPICH"


class LauncherCreationPolicy(StrEnum):
    AT_STARTUP = "AtStartup"
    WAIT_FOR_WORKERS_READY = "WaitForWorkersReady"


@dataclass
class EnvVar:
    name: str = json_field("name", "")
    value: str | None = json_field("value")
    value_from: dict[str, Any] | None = json_field("valueFrom")


@dataclass
class Container:
    name: str = json_field("name", "")
    image: str | None = json_field("image")
    command: list[str] | None = json_field("command")
    args: list[str] | None = json_field("args")
    env: list[EnvVar] | None = json_field("env")
    resources: dict[str, Any] | None = json_field("resources")
    extra: dict[str, Any] = extra_field()


@dataclass
class PodSpec:
    containers: list[Container] = json_field("containers", default_factory=list)
    node_selector: dict[str, str] | None = json_field("nodeSelector")
    tolerations: list[dict[str, Any]] | None = json_field("tolerations")
    service_account_name: str | None = json_field("serviceAccountName")
    image_pull_secrets: list[dict[str, Any]] | None = json_field("imagePullSecrets")
    extra: dict[str, Any] = extra_field()


@dataclass
class PodTemplate:
    metadata: dict[str, Any] | None = json_field("metadata")
    spec: PodSpec = json_field("spec", default_factory=PodSpec)


@dataclass
class ReplicaSpec:
    replicas: int | None = json_field("replicas", bits=INT32)
    restart_policy: RestartPolicy | None = json_field("restartPolicy")
    template: PodTemplate = json_field("template", default_factory=PodTemplate)

    @property
    def count(self) -> int:
        """Replicas as the operator reads them: an unset count means 1."""
        return 1 if self.replicas is None else self.replicas


@dataclass
class SchedulingPolicy:
    min_available: int | None = json_field("minAvailable", bits=INT32)
    queue: str | None = json_field("queue")
    min_resources: dict[str, Any] | None = json_field("minResources")
    priority_class: str | None = json_field("priorityClass")
    schedule_timeout_seconds: int | None = json_field("scheduleTimeoutSeconds", bits=INT32)


@dataclass
class RunPolicy:
    clean_pod_policy: CleanPodPolicy | None = json_field("cleanPodPolicy")
    ttl_seconds_after_finished: int | None = json_field("ttlSecondsAfterFinished", bits=INT32)
    active_deadline_seconds: int | None = json_field("activeDeadlineSeconds")
    backoff_limit: int | None = json_field("backoffLimit", bits=INT32)
    scheduling_policy: SchedulingPolicy | None = json_field("schedulingPolicy")
    suspend: bool | None = json_field("suspend")
    managed_by: str | None = json_field("managedBy")


@dataclass
class RdzvConf:
    key: str | None = json_field("key")
    value: str | None = json_field("value")


@dataclass
class ElasticPolicy:
    min_replicas: int | None = json_field("minReplicas", bits=INT32)
    max_replicas: int | None = json_field("maxReplicas", bits=INT32)
    rdzv_backend: str | None = json_field("rdzvBackend")
    rdzv_port: int | None = json_field("rdzvPort", bits=INT32)
    rdzv_host: str | None = json_field("rdzvHost")
    rdzv_id: str | None = json_field("rdzvId")
    rdzv_conf: list[RdzvConf] | None = json_field("rdzvConf")
    standalone: bool | None = json_field("standalone")
    n_proc_per_node: int | None = json_field("nProcPerNode", bits=INT32)
    max_restarts: int | None = json_field("maxRestarts", bits=INT32)
    metrics: list[dict[str, Any]] | None = json_field("metrics")


@dataclass
class JobSpec:
    """Every field of a job's ``spec`` except the replica specs.

    Which of these a kind accepts is declared once, in :mod:`kftrain.job.kinds`.
    """

    run_policy: RunPolicy | None = json_field("runPolicy")
    # PyTorchJob
    elastic_policy: ElasticPolicy | None = json_field("elasticPolicy")
    nproc_per_node: str | None = json_field("nprocPerNode")
    # TFJob
    success_policy: str | None = json_field("successPolicy")
    enable_dynamic_worker: bool | None = json_field("enableDynamicWorker")
    # MPIJob (v2beta1 and v1)
    slots_per_worker: int | None = json_field("slotsPerWorker", bits=INT32)
    ssh_auth_mount_path: str | None = json_field("sshAuthMountPath")
    launcher_creation_policy: LauncherCreationPolicy | None = json_field("launcherCreationPolicy")
    run_launcher_as_worker: bool | None = json_field("runLauncherAsWorker")
    mpi_implementation: MPIImplementation | None = json_field("mpiImplementation")
    main_container: str | None = json_field("mainContainer")
    clean_pod_policy: CleanPodPolicy | None = json_field("cleanPodPolicy")


@dataclass
class ObjectMeta:
    name: str | None = json_field("name")
    generate_name: str | None = json_field("generateName")
    namespace: str | None = json_field("namespace")
    labels: dict[str, str] | None = json_field("labels")
    annotations: dict[str, str] | None = json_field("annotations")
    extra: dict[str, Any] = extra_field()


@dataclass
class TrainingJob:
    """A TFJob, PyTorchJob, MPIJob or TrainJob, in the shape the operator reads it."""

    kind: JobKind
    api_version: str
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    replica_specs: dict[str, ReplicaSpec] = field(default_factory=dict)
    spec: JobSpec = field(default_factory=JobSpec)
    # A TrainJob's own spec and its resolved runtime (kftrain.job.kinds.trainjob.TrainJobSource); the replica
    # specs above are then the runtime's replicated jobs as the Trainer resolves them. None for other kinds.
    trainjob: Any = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.run_policy or RunPolicy()

    def replicas_of(self, replica_type: str) -> int:
        spec = self.replica_specs.get(replica_type)
        return 0 if spec is None else spec.count

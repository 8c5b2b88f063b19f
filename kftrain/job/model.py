"""The typed shapes every job kind shares: the job, its metadata, replica specs, pod templates and run policy.

A kind's own ``spec`` fields are a subclass of :class:`JobSpec` in that kind's package
(``kftrain.job.kinds.<kind>.spec``). Field names follow the Kubernetes JSON names (declared with
``json_field``) so the mapping to manifests is mechanical. Fields the model does not type are kept in
``extra`` and rendered back untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kftrain.compat import StrEnum
from kftrain.job.serde import INT32, extra_field, json_field


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


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
class JobSpec:
    """What every kind's ``spec`` has besides its replica specs; each kind subclasses it with its own fields."""

    run_policy: RunPolicy | None = json_field("runPolicy")


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
    """A job of any kind (``kftrain.job.kinds``), in the shape its operator reads it."""

    kind: str
    api_version: str
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    replica_specs: dict[str, ReplicaSpec] = field(default_factory=dict)
    spec: JobSpec = field(default_factory=JobSpec)
    # What a kind whose manifest is not laid out as replica specs keeps of it (a TrainJob's own spec and its
    # resolved runtime, kftrain.job.kinds.trainjob.nodes.TrainJobSource); the replica specs above are then what it
    # resolves to. None for the kinds whose manifest is their replica specs.
    source: Any = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.run_policy or RunPolicy()

    def replicas_of(self, replica_type: str) -> int:
        spec = self.replica_specs.get(replica_type)
        return 0 if spec is None else spec.count

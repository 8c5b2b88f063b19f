"""Every pod setting a platform gives a job, each declared once, as a field of :class:`PodSettings` (:func:`setting`):
its launch input (default and description), its check, the ``dsl.TaskConfig`` field KFP passes it through as, the
kfp-kubernetes call that places a pipeline step with it, and what it does to the job (:mod:`.pod_apply`).

The launch inputs and the launch task's own TaskConfig (KFP backend >= 2.15) are both parsed into a PodSettings, and
:func:`apply_pod_settings` puts them on every replica, the explicit inputs first: a later layer, like the settings
at all, only fills in what the job (a manifest's own values) and earlier layers leave unset. The launch components'
TaskConfig passthroughs and the pipelines' platform parameters are read from these declarations.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.contract import MOUNTED_CREDENTIALS_DIR
from kftrain.errors import JobSpecError
from kftrain.job import affinity_checks, pod_apply, volume_checks
from kftrain.job import pod_checks as check
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import EnvVar, SchedulingPolicy, TrainingJob
from kftrain.job.pod_apply import Replica, storage_secret_refs
from kftrain.job.request import env_input
from kftrain.job.security_checks import security_context
from kftrain.job.serde import from_dict
from kftrain.job.validate import validate_job

TASK_CONFIG = "task_config"  # the launch component's input that carries the TaskConfig, and how errors name it


@dataclass(frozen=True)
class Setting:
    """What one pod setting is, beside its name, type and default."""

    check: Callable[[str, Any], Any]  # (the name errors give, the value) -> the value checked, normalized
    on_pod: Callable[[Replica, Any, str], None] | None = None  # what it does to each replica's pod
    on_job: Callable[[TrainingJob, Any], None] | None = None  # what it does to the job
    task_config: str = ""  # the dsl.TaskConfigField it comes through as (the field's name is TaskConfig's attribute)
    to_launch_pod: bool = False  # KFP also applies that TaskConfig field to the launch pod (apply_to_task)
    step: str = ""  # the kfp-kubernetes function that puts its pipeline parameter (as JSON) on a step's pod
    pipeline: bool = False  # a parameter of the shipped pipelines (as every setting with a step call is)


def setting(default: Any, doc: str | None = None, **declared: Any) -> Any:
    """A field of :class:`PodSettings`: ``doc`` makes it a launch input (with ``default``); without one only a
    TaskConfig gives it. ``declared`` are the :class:`Setting`'s fields."""
    metadata = {"setting": Setting(**declared), **({"doc": doc, "group": ""} if doc is not None else {})}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _secret_env(field: str, value: Any) -> dict[str, str]:
    given = check.string_map(field, value, secret=True)
    for env, ref in given.items():
        check.env_name(f"{field}.{env}", env)
        check.secret_ref(f"{field}.{env}", ref)
    return given


def _pvc_mounts(field: str, value: Any) -> dict[str, str]:
    """Mount path (normalized) -> claim; each path once (ValidateVolumeMounts: "must be unique")."""
    mounts: dict[str, str] = {}
    taken: dict[str, str] = {}
    for path, claim in check.string_map(field, value).items():
        normal = check.mount_path(f"{field}.{path}", path)
        if normal in taken:
            raise JobSpecError(
                f"{field}.{path}", f"{normal} is already mounted by {taken[normal]}; mount the claim elsewhere"
            )
        taken[normal] = f"{field}.{path}"
        mounts[normal] = check.dns1123_subdomain(f"{field}.{path}", claim)
    return mounts


def _scheduling(field: str, value: Any) -> Any:
    if not isinstance(value, Mapping):
        raise JobSpecError(field, f"expected a mapping, got {type(value).__name__}")
    policy = from_dict(SchedulingPolicy, value, field) if value else None  # its fields, as the operator's
    if policy is not None and policy.priority_class:
        check.dns1123_subdomain(f"{field}.priorityClass", policy.priority_class)
    return value


def _env(field: str, value: Any) -> list[EnvVar]:
    """Each entry as an entry of the ``env`` input is checked (:func:`~kftrain.job.request.env_input`), each name
    once (ValidateEnv would keep only the last)."""
    out: list[EnvVar] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(check.list_of(field, value)):
        var = from_dict(EnvVar, check.mapping(f"{field}[{i}]", entry), f"{field}[{i}]")  # its fields, typed
        checked = env_input(f"{field}[{i}]", var.name, "" if var.value is None else var.value, var.value_from)
        if checked.name in first:
            raise JobSpecError(f"{field}[{i}]", f"{checked.name!r} is already set by {field}[{first[checked.name]}]")
        first[checked.name] = i
        out.append(checked)
    return out


def _int_from(low: int) -> Callable[[str, Any], int]:
    """Whole numbers (KFP passes ints through JSON as doubles) from ``low`` to the int32 the API's fields are."""
    return lambda field, value: check.integer(field, value, low=low, high=check.INT32_MAX)


def _queue_name(field: str, value: Any) -> str:
    """A Kueue LocalQueue's name, given as the value of the queue-name label: both rules hold."""
    return check.label_value(field, check.name(field, value))


def _pull_secrets(field: str, value: Any) -> list[str]:
    return [check.dns1123_subdomain(f"{field}[{i}]", s) for i, s in enumerate(check.list_of(field, value))]


@dataclass(frozen=True)
class PodSettings:
    """The settings of one source (the launch inputs, or a TaskConfig: ``origin``), each checked when made: a
    malformed value is a :class:`JobSpecError` naming it."""

    secret_env: Mapping[str, str] = setting(
        {},
        'Variables read from secrets: {"ENV_NAME": "secret-name/key"}, never literal.',
        check=_secret_env,
        on_pod=pod_apply.secret_env,
    )
    # KFP's own secret, which KFP's profile controller makes in every profile namespace (kubeflow/pipelines@2.17.0:
    # manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py, mlpipeline-minio-artifact):
    # the default of the components and of every shipped pipeline alike. Read optionally, so a namespace without it,
    # or a local run, gets no credentials from it and still runs.
    storage_secret: str = setting(
        "mlpipeline-minio-artifact",
        "Secret with the object store's accesskey/secretkey (KFP's mlpipeline-minio-artifact layout); empty: none.",
        check=check.name,
        on_pod=pod_apply.storage_secret,
        pipeline=True,
    )
    cpu: str = setting(
        "",
        'CPU request and limit of each replica (e.g. "2"); empty: none.',
        check=check.quantity,
        on_pod=pod_apply.request_and_limit("cpu"),
        pipeline=True,
    )
    memory: str = setting(
        "",
        'Memory request and limit of each replica (e.g. "4Gi"); empty: none.',
        check=check.quantity,
        on_pod=pod_apply.request_and_limit("memory"),
        pipeline=True,
    )
    gpus: int = setting(
        0,
        "nvidia.com/gpu limit of each training replica (never the MPI launcher's).",
        check=_int_from(0),
        on_pod=pod_apply.gpus,
        pipeline=True,
    )
    shm_size: str = setting(
        "",
        "Size of a memory-backed /dev/shm on each training replica; empty: none.",
        check=check.quantity,
        on_pod=pod_apply.shm_size,
    )
    node_selector: Mapping[str, str] = setting(
        {},
        "Node labels every replica's pod must match.",
        check=check.labels,
        on_pod=pod_apply.node_selector,
        task_config="KUBERNETES_NODE_SELECTOR",
        to_launch_pod=True,
        step="add_node_selector_json",
    )
    tolerations: Sequence[Mapping[str, Any]] = setting(
        [],
        "Kubernetes tolerations of every replica's pod.",
        check=check.tolerations,
        on_pod=pod_apply.tolerations,
        task_config="KUBERNETES_TOLERATIONS",
        to_launch_pod=True,
        step="add_toleration_json",
    )
    service_account: str = setting(
        "",
        "Service account of every replica's pod; empty: the namespace's default.",
        check=check.name,
        on_pod=pod_apply.service_account,
        pipeline=True,
    )
    image_pull_secrets: Sequence[str] = setting(
        [],
        "Names of the secrets to pull the images with.",
        check=_pull_secrets,
        on_pod=pod_apply.image_pull_secrets,
        pipeline=True,
    )
    pvc_mounts: Mapping[str, str] = setting(
        {},
        'PersistentVolumeClaims to mount: {"/mount/path": "claim-name"}.',
        check=_pvc_mounts,
        on_pod=pod_apply.pvc_mounts,
    )
    priority_class: str = setting(
        "",
        "PriorityClass of every replica's pod; empty: none.",
        check=check.name,
        on_pod=pod_apply.priority_class,
        pipeline=True,
    )
    queue_name: str = setting(
        "",
        "Kueue LocalQueue to admit the job through (kueue.x-k8s.io/queue-name).",
        check=_queue_name,
        on_job=pod_apply.queue_name,
        pipeline=True,
    )
    scheduling: Mapping[str, Any] = setting(
        {},
        "The operator's schedulingPolicy (Volcano: queue, minAvailable, priorityClass...).",
        check=_scheduling,
        on_job=pod_apply.scheduling,
    )
    ttl_seconds_after_finished: int = setting(
        -1,
        "Delete the finished job after this long (-1: never).",
        check=_int_from(-1),
        on_job=pod_apply.ttl_seconds_after_finished,
    )
    security_context: Mapping[str, Any] = setting(
        {},
        "securityContext of every container of every replica, where it sets none; a namespace enforcing the "
        'restricted Pod Security Standard needs {"runAsNonRoot": true, "allowPrivilegeEscalation": false, '
        '"capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}} and an image that runs '
        "as a non-root user (or runAsUser).",
        check=security_context,
        on_pod=pod_apply.security_context,
    )
    # Only a TaskConfig gives these. The resources never reach the launch pod: a GPU asked for the training replicas
    # must not be held by the launcher (kubeflow/pipelines@2.17.0:backend/src/v2/driver/driver.go,
    # getTaskConfigOptions, applies to the task's own pod only the fields marked apply_to_task).
    resources: Mapping[str, Any] = setting(
        {}, check=check.resources, on_pod=pod_apply.resources, task_config="RESOURCES"
    )
    env: Sequence[EnvVar] = setting([], check=_env, on_pod=pod_apply.env, task_config="ENV", to_launch_pod=True)
    affinity: Mapping[str, Any] = setting(
        {}, check=affinity_checks.affinity, on_pod=pod_apply.affinity, task_config="KUBERNETES_AFFINITY"
    )
    volumes: Sequence[Mapping[str, Any]] = setting(
        [], check=volume_checks.volumes, on_pod=pod_apply.volumes, task_config="KUBERNETES_VOLUMES", to_launch_pod=True
    )
    volume_mounts: Sequence[Mapping[str, Any]] = setting(
        [],
        check=volume_checks.volume_mounts,
        on_pod=pod_apply.volume_mounts,
        task_config="KUBERNETES_VOLUMES",
        to_launch_pod=True,
    )
    origin: str = dataclasses.field(default="", repr=False)  # "": the launch inputs; else the input that gave them

    def __post_init__(self) -> None:
        """Each setting through its check (:mod:`.pod_checks` says whose rule each is), as the value it means."""
        for name, declared, value in self.declared():
            object.__setattr__(self, name, declared.check(self.where(name), value))
        self._refuse_taken_mounts()

    def where(self, name: str) -> str:
        """How an error names setting ``name`` of these settings."""
        return f"{self.origin}.{name}" if self.origin else name

    def declared(self) -> Iterator[tuple[str, Setting, Any]]:
        """Each setting these settings carry (a TaskConfig's: only those it passes through), with its value."""
        for name, declared in settings_of(type(self)).items():
            if not self.origin or declared.task_config:
                yield name, declared, getattr(self, name)

    @classmethod
    def from_task_config(cls, config: Any) -> PodSettings:
        """A ``kfp.dsl.TaskConfig`` (its fields None when the task sets nothing) as settings, each checked."""
        given = {n: getattr(config, n, None) for n, d in settings_of(cls).items() if d.task_config}
        return cls(origin=TASK_CONFIG, **{name: value for name, value in given.items() if value is not None})

    def sets_any(self) -> bool:
        """Whether a setting has a value (a TaskConfig's: whether the task set any)."""
        return any(bool(value) for _, _, value in self.declared())

    def _refuse_taken_mounts(self) -> None:
        """No claim where the settings mount something else (/dev/shm, the storage secret's folder)."""
        taken = {"/dev/shm": "shm_size"} if self.shm_size else {}
        if self.storage_secret:
            taken[MOUNTED_CREDENTIALS_DIR] = "storage_secret"
        for path in self.pvc_mounts:
            if path in taken:
                raise JobSpecError(
                    self.where(f"pvc_mounts.{path}"),
                    f"{path} is already mounted by {taken[path]}; mount the claim elsewhere",
                )

    def secret_refs(self) -> dict[str, dict[str, Any]]:
        """Every variable read from a secret, as its ``secretKeyRef``: the storage secret's, then ``secret_env``."""
        refs = storage_secret_refs(self.storage_secret) if self.storage_secret else {}
        given = {name: ref.partition("/") for name, ref in self.secret_env.items()}
        return {**refs, **{name: {"name": secret, "key": key} for name, (secret, _, key) in given.items()}}


def settings_of(cls: type[PodSettings] = PodSettings) -> dict[str, Setting]:
    """Each pod setting ``cls`` declares, by name, in the order declared."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def task_config_passthroughs(cls: type[PodSettings] = PodSettings) -> dict[str, bool]:
    """Each ``dsl.TaskConfigField`` the settings come through, and whether KFP applies it to the launch pod too."""
    out: dict[str, bool] = {}
    for declared in settings_of(cls).values():
        if declared.task_config:
            out[declared.task_config] = out.get(declared.task_config, False) or declared.to_launch_pod
    return out


def step_placements(cls: type[PodSettings] = PodSettings) -> dict[str, str]:
    """Each setting a pipeline puts on its steps' pods, and the kfp-kubernetes function that does."""
    return {name: declared.step for name, declared in settings_of(cls).items() if declared.step}


def pipeline_settings(cls: type[PodSettings] = PodSettings) -> list[str]:
    """The settings the shipped pipelines take as parameters, in the order declared."""
    return [name for name, declared in settings_of(cls).items() if declared.pipeline or declared.step]


def apply_pod_settings(job: TrainingJob, *layers: PodSettings) -> TrainingJob:
    """A copy of ``job`` with each layer of settings on the job and on every replica, the first winning. A TaskConfig's
    layer is checked with the job whole, before (what is refused then is the job's) and after."""
    out = copy.deepcopy(job)
    kind = kind_of(out)
    replicas = [
        Replica(rtype, spec.template.spec, main_container(out, rtype), kind.hosts_training(out, rtype))
        for rtype, spec in out.replica_specs.items()
    ]
    for layer in layers:
        if layer.origin and not layer.sets_any():
            continue
        if layer.origin:
            validate_job(out)
        for name, declared, value in layer.declared():
            if declared.on_job is not None:
                declared.on_job(out, value)
            on_pod = declared.on_pod
            if on_pod is not None:
                for replica in replicas:
                    on_pod(replica, value, layer.where(name))
        if layer.origin:
            try:  # the job whole: what the task's settings make of it, as the API server and operator see it
                validate_job(out)
            except JobSpecError as exc:
                suffix = f" (with the launch task's own settings, {layer.origin})"
                raise JobSpecError(exc.field, f"{exc.message}{suffix}") from None
    return out

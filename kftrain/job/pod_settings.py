"""The one policy for what a platform sets on a job: its pods' resources, placement, identity, credentials,
volumes, and the job's scheduling.

:class:`PodSettings` holds what the launch inputs give (each of its fields is one, checked by
:mod:`.pod_checks`); :func:`apply_pod_settings` puts it on every replica of a job, typed or from a manifest, the
same way on every backend:

* resources on the main container: ``cpu`` and ``memory`` as request and limit alike (Guaranteed QoS: the
  pods are the last evicted under node pressure, and a static CPU manager gives them whole cores, so one rank
  is not slowed by its neighbours and with it the whole synchronous job); ``gpus`` as an ``nvidia.com/gpu``
  limit (Kubernetes takes the request from it; GPUs cannot be overcommitted), and a memory-backed
  ``/dev/shm`` of ``shm_size`` (PyTorch's data loaders and NCCL need more than the runtime's 64 MiB) — both
  only on the replicas that host training processes, never on an MPI launcher that only runs mpirun;
* node selector, tolerations, service account, image pull secrets and priority class on every pod;
* ``secret_env`` as ``valueFrom.secretKeyRef``; ``storage_secret`` (a secret with the keys ``accesskey`` and
  ``secretkey``, the layout of KFP's ``mlpipeline-minio-artifact``) as ``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY`` by secretKeyRef and, mounted, at :data:`MOUNTED_CREDENTIALS_DIR` (processes that do
  not inherit the container's environment, such as MPI ranks started over ssh, read it there): a credential
  never appears as a literal value;
* ``pvc_mounts`` (mount path -> claim) on every replica's main container;
* ``security_context`` on every container and init container of every replica's pod (what a namespace enforcing a
  Pod Security Standard checks on each of them), and the fields a pod's securityContext shares on the pod, which a
  container an operator adds inherits;
* on the job: Kueue's ``kueue.x-k8s.io/queue-name`` label, the operator's ``runPolicy.schedulingPolicy``
  (Volcano's queue, minAvailable, priorityClass...) and ``runPolicy.ttlSecondsAfterFinished``.

The settings fill in what a job does not already say: a job built from inputs has nothing of its own, and a
manifest's own values (its node selector keys, service account, resources, env, volumes, labels, run
policy) win over the inputs.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.contract import MOUNTED_CREDENTIALS_DIR
from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds import kind_of, launch_input, main_container
from kftrain.job.model import Container, EnvVar, PodSpec, RunPolicy, SchedulingPolicy, TrainingJob
from kftrain.job.serde import from_dict

GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
STORAGE_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "accesskey", "AWS_SECRET_ACCESS_KEY": "secretkey"}
_SHM_VOLUME = "kftrain-shm"
_STORAGE_VOLUME = "kftrain-object-store"


@dataclass(frozen=True)
class PodSettings:
    """A platform's settings, each a launch input in the form the component takes it (declared once here, with
    its default and description), checked when made: a malformed value is a :class:`JobSpecError` naming it."""

    secret_env: Mapping[str, str] = launch_input(
        {}, 'Variables read from secrets: {"ENV_NAME": "secret-name/key"}, never literal.'
    )
    # KFP's own secret, which KFP's profile controller makes in every profile namespace (kubeflow/pipelines@2.17.0:
    # manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py, mlpipeline-minio-artifact):
    # the default of the components and of every shipped pipeline alike. Read optionally (secret_refs,
    # _volume_sources), so a namespace without it, or a local run, gets no credentials from it and still runs.
    storage_secret: str = launch_input(
        "mlpipeline-minio-artifact",
        "Secret with the object store's accesskey/secretkey (KFP's mlpipeline-minio-artifact layout); empty: none.",
    )
    cpu: str = launch_input("", 'CPU request and limit of each replica (e.g. "2"); empty: none.')
    memory: str = launch_input("", 'Memory request and limit of each replica (e.g. "4Gi"); empty: none.')
    gpus: int = launch_input(0, "nvidia.com/gpu limit of each training replica (never the MPI launcher's).")
    shm_size: str = launch_input("", "Size of a memory-backed /dev/shm on each training replica; empty: none.")
    node_selector: Mapping[str, str] = launch_input({}, "Node labels every replica's pod must match.")
    tolerations: Sequence[Mapping[str, Any]] = launch_input([], "Kubernetes tolerations of every replica's pod.")
    service_account: str = launch_input("", "Service account of every replica's pod; empty: the namespace's default.")
    image_pull_secrets: Sequence[str] = launch_input([], "Names of the secrets to pull the images with.")
    pvc_mounts: Mapping[str, str] = launch_input({}, 'PersistentVolumeClaims to mount: {"/mount/path": "claim-name"}.')
    priority_class: str = launch_input("", "PriorityClass of every replica's pod; empty: none.")
    queue_name: str = launch_input("", "Kueue LocalQueue to admit the job through (kueue.x-k8s.io/queue-name).")
    scheduling: Mapping[str, Any] = launch_input(
        {}, "The operator's schedulingPolicy (Volcano: queue, minAvailable, priorityClass...)."
    )
    ttl_seconds_after_finished: int = launch_input(-1, "Delete the finished job after this long (-1: never).")
    security_context: Mapping[str, Any] = launch_input(
        {},
        "securityContext of every container of every replica, where it sets none; a namespace enforcing the "
        'restricted Pod Security Standard needs {"runAsNonRoot": true, "allowPrivilegeEscalation": false, '
        '"capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}} and an image that runs '
        "as a non-root user (or runAsUser).",
    )

    def __post_init__(self) -> None:
        """Refuse a setting the API server would refuse, naming it (:mod:`.pod_checks` says whose rule each check
        is); whole numbers given as floats (KFP passes ints through JSON and lists as doubles) are taken as the
        ints they are, and numbers given for strings as the strings they mean."""
        gpus = check.integer("gpus", self.gpus, low=0, high=check.INT32_MAX)
        object.__setattr__(self, "gpus", gpus)
        # -1 (the default) leaves the TTL unset; the operator's field is an int32 >= 0.
        ttl = check.integer("ttl_seconds_after_finished", self.ttl_seconds_after_finished, low=-1, high=check.INT32_MAX)
        object.__setattr__(self, "ttl_seconds_after_finished", ttl)
        for field in ("cpu", "memory", "shm_size"):
            object.__setattr__(self, field, check.quantity(field, getattr(self, field)))
        for field in ("service_account", "priority_class", "storage_secret"):
            object.__setattr__(self, field, check.name(field, getattr(self, field)))
        # A Kueue LocalQueue's name, given as the value of the queue-name label: both rules hold.
        object.__setattr__(
            self, "queue_name", check.label_value("queue_name", check.name("queue_name", self.queue_name))
        )
        object.__setattr__(self, "node_selector", check.labels("node_selector", self.node_selector))
        object.__setattr__(self, "tolerations", check.tolerations("tolerations", self.tolerations))
        pull = check.list_of("image_pull_secrets", self.image_pull_secrets)
        object.__setattr__(
            self,
            "image_pull_secrets",
            [check.dns1123_subdomain(f"image_pull_secrets[{i}]", s) for i, s in enumerate(pull)],
        )
        secret_env = check.string_map("secret_env", self.secret_env, secret=True)
        for env, ref in secret_env.items():
            check.env_name(f"secret_env.{env}", env)
            check.secret_ref(f"secret_env.{env}", ref)
        object.__setattr__(self, "secret_env", secret_env)
        object.__setattr__(self, "pvc_mounts", self._checked_pvc_mounts())
        object.__setattr__(self, "security_context", check.security_context("security_context", self.security_context))
        if not isinstance(self.scheduling, Mapping):
            raise JobSpecError("scheduling", f"expected a mapping, got {type(self.scheduling).__name__}")
        policy = self.scheduling_policy  # its fields, as the operator's schedulingPolicy
        if policy is not None and policy.priority_class:
            check.dns1123_subdomain("scheduling.priorityClass", policy.priority_class)

    def _checked_pvc_mounts(self) -> dict[str, str]:
        """Mount path (normalized) -> claim; each path once (ValidateVolumeMounts: "must be unique"), and none where
        the settings mount something else (/dev/shm, the storage secret's folder)."""
        taken = {"/dev/shm": "shm_size"} if self.shm_size else {}
        if self.storage_secret:
            taken[MOUNTED_CREDENTIALS_DIR] = "storage_secret"
        mounts: dict[str, str] = {}
        for path, claim in check.string_map("pvc_mounts", self.pvc_mounts).items():
            where = f"pvc_mounts.{path}"
            normal = check.mount_path(where, path)
            if normal in taken:
                raise JobSpecError(where, f"{normal} is already mounted by {taken[normal]}; mount the claim elsewhere")
            taken[normal] = f"pvc_mounts.{path}"
            mounts[normal] = check.dns1123_subdomain(where, claim)
        return mounts

    @property
    def scheduling_policy(self) -> SchedulingPolicy | None:
        return from_dict(SchedulingPolicy, self.scheduling, "scheduling") if self.scheduling else None

    @property
    def ttl(self) -> int | None:
        return None if self.ttl_seconds_after_finished < 0 else self.ttl_seconds_after_finished

    def secret_refs(self) -> dict[str, dict[str, Any]]:
        """Every variable read from a secret, as its ``secretKeyRef``: ``secret_env``, and the storage secret's
        credentials (optional: a platform may grant object-store access another way, such as a pod identity)."""
        refs = {
            name: {"name": self.storage_secret, "key": key, "optional": True}
            for name, key in STORAGE_SECRET_KEYS.items()
            if self.storage_secret
        }
        given = {name: ref.partition("/") for name, ref in self.secret_env.items()}
        return {**refs, **{name: {"name": secret, "key": key} for name, (secret, _, key) in given.items()}}


def apply_pod_settings(job: TrainingJob, settings: PodSettings) -> TrainingJob:
    """A copy of ``job`` with ``settings`` on the job and on every replica's pod and main container."""
    out = copy.deepcopy(job)
    kind = kind_of(out)
    _apply_to_job(out, settings)
    for rtype, rspec in out.replica_specs.items():
        trains = kind.hosts_training(out, rtype)
        pod = rspec.template.spec
        _apply_to_pod(pod, settings, shm=trains)
        _apply_security_context(pod, settings.security_context)
        container = main_container(out, rtype)
        if container is None:
            continue
        container.resources = resources(
            container, cpu=settings.cpu, memory=settings.memory, gpus=settings.gpus if trains else 0
        )
        defined = {e.name for e in container.env or []}
        container.env = [
            *(container.env or []),
            *(
                EnvVar(name=name, value_from={"secretKeyRef": ref})
                for name, ref in settings.secret_refs().items()
                if name not in defined
            ),
        ] or None
        _add_mounts(container, _mounts(settings, shm=trains))
    return out


def _apply_security_context(pod: PodSpec, given: Mapping[str, Any]) -> None:
    """``given`` as the securityContext of every container and init container that sets none, and its fields a
    pod's securityContext also has on the pod, where it leaves them unset: a container an operator adds to the pod
    (training-operator's ``init-pytorch``) then inherits them."""
    if not given:
        return
    init_containers = [c for c in pod.extra.get("initContainers") or [] if isinstance(c, dict)]
    for fields in [c.extra for c in pod.containers] + init_containers:
        fields.setdefault("securityContext", copy.deepcopy(dict(given)))
    shared = {k: copy.deepcopy(v) for k, v in given.items() if k in check.POD_SECURITY_CONTEXT_FIELDS}
    if shared:
        pod.extra["securityContext"] = {**shared, **(pod.extra.get("securityContext") or {})}


def _apply_to_job(job: TrainingJob, settings: PodSettings) -> None:
    if settings.queue_name:
        job.metadata.labels = {QUEUE_NAME_LABEL: settings.queue_name, **(job.metadata.labels or {})}
    scheduling, ttl = settings.scheduling_policy, settings.ttl
    if scheduling is None and ttl is None:
        return
    run_policy = job.spec.run_policy or RunPolicy()
    if scheduling is not None and run_policy.scheduling_policy is None:
        run_policy.scheduling_policy = scheduling
    if ttl is not None and run_policy.ttl_seconds_after_finished is None:
        run_policy.ttl_seconds_after_finished = ttl
    job.spec.run_policy = run_policy


def _apply_to_pod(pod: PodSpec, settings: PodSettings, *, shm: bool) -> None:
    if settings.node_selector:
        pod.node_selector = {**settings.node_selector, **(pod.node_selector or {})}
    if settings.tolerations:
        tolerations = pod.tolerations or []
        pod.tolerations = [*tolerations, *(dict(t) for t in settings.tolerations if dict(t) not in tolerations)]
    if settings.service_account and not pod.service_account_name:
        pod.service_account_name = settings.service_account
    if settings.image_pull_secrets:
        named = {s.get("name") for s in pod.image_pull_secrets or []}
        pod.image_pull_secrets = [*(pod.image_pull_secrets or [])] + [
            {"name": s} for s in settings.image_pull_secrets if s not in named
        ]
    if settings.priority_class:
        pod.extra.setdefault("priorityClassName", settings.priority_class)
    wanted = _volume_sources(settings, shm=shm)
    if wanted:
        volumes = list(pod.extra.get("volumes") or [])
        have = {v.get("name") for v in volumes}
        pod.extra["volumes"] = volumes + [{"name": n, **source} for n, source in wanted.items() if n not in have]


def _volume_sources(settings: PodSettings, *, shm: bool) -> dict[str, dict[str, Any]]:
    """Volume name -> its source, for every volume the settings add to a pod."""
    sources: dict[str, dict[str, Any]] = {}
    if shm and settings.shm_size:
        sources[_SHM_VOLUME] = {"emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}
    if settings.storage_secret:
        sources[_STORAGE_VOLUME] = {"secret": {"secretName": settings.storage_secret, "optional": True}}
    for claim in dict.fromkeys(settings.pvc_mounts.values()):
        sources[pvc_volume_name(claim)] = {"persistentVolumeClaim": {"claimName": claim}}
    return sources


def _mounts(settings: PodSettings, *, shm: bool) -> dict[str, str]:
    """Mount path -> volume name, for the main container: every path the settings mount (a claim may be mounted
    at several paths, each a mount of its one volume)."""
    mounts: dict[str, str] = {}
    if shm and settings.shm_size:
        mounts["/dev/shm"] = _SHM_VOLUME
    if settings.storage_secret:
        mounts[MOUNTED_CREDENTIALS_DIR] = _STORAGE_VOLUME
    for path, claim in settings.pvc_mounts.items():
        mounts[path] = pvc_volume_name(claim)
    return mounts


def pvc_volume_name(claim: str) -> str:
    """The name of the volume of claim ``claim``: ``pvc-<claim>`` when that is a valid volume name (a DNS-1123
    label: at most 63 characters, no '.'); else the claim made label-safe, cut, and suffixed with a hash of the whole
    claim name, so two claims never share a volume (a claim name may be a 253-character DNS subdomain)."""
    plain = f"pvc-{claim}"
    if check.is_dns1123_label(plain):
        return plain
    digest = hashlib.sha256(claim.encode()).hexdigest()[:10]
    safe = re.sub(r"[^a-z0-9-]+", "-", claim)[: check.LABEL_MAX - len("pvc--") - len(digest)].strip("-")
    return f"pvc-{safe}-{digest}" if safe else f"pvc-{digest}"


def _add_mounts(container: Container, mounts: Mapping[str, str]) -> None:
    """Mount each volume at its path (``mounts``: path -> volume), unless the container already mounts something
    there (a manifest's own mounts win)."""
    if not mounts:
        return
    existing = list(container.extra.get("volumeMounts") or [])
    taken = {m.get("mountPath") for m in existing}
    added = [
        {"name": name, "mountPath": path, **({"readOnly": True} if path == MOUNTED_CREDENTIALS_DIR else {})}
        for path, name in mounts.items()
        if path not in taken
    ]
    if added:
        container.extra["volumeMounts"] = existing + added


def resources(container: Container, *, cpu: str = "", memory: str = "", gpus: int = 0) -> dict[str, Any] | None:
    """``container``'s resources with these filled in where it sets none: cpu and memory as request and
    limit, GPUs as a limit."""
    current = copy.deepcopy(container.resources or {})
    requests: dict[str, Any] = dict(current.get("requests") or {})
    limits: dict[str, Any] = dict(current.get("limits") or {})
    for name, value in (("cpu", cpu), ("memory", memory)):
        if value and name not in requests and name not in limits:
            requests[name] = limits[name] = value
    if gpus and GPU_RESOURCE not in limits:
        limits[GPU_RESOURCE] = gpus
    if limits:
        current["limits"] = limits
    if requests:
        current["requests"] = requests
    return current or None

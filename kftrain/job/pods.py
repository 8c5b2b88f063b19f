"""The one policy for what a platform sets on a job: its pods' resources, placement, identity, credentials,
volumes, and the job's scheduling.

:class:`PodSettings` holds what the launch inputs give; :func:`apply_pod_settings` puts it on every replica of
a job, typed or from a manifest, the same way on every backend:

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
* on the job: Kueue's ``kueue.x-k8s.io/queue-name`` label, the operator's ``runPolicy.schedulingPolicy``
  (Volcano's queue, minAvailable, priorityClass...) and ``runPolicy.ttlSecondsAfterFinished``.

The settings fill in what a job does not already say: a job built from inputs has nothing of its own, and a
manifest's own values (its node selector keys, service account, resources, env, volumes, labels, run
policy) win over the inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.contract import MOUNTED_CREDENTIALS_DIR
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import Container, EnvVar, PodSpec, RunPolicy, SchedulingPolicy, TrainingJob

GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
STORAGE_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "accesskey", "AWS_SECRET_ACCESS_KEY": "secretkey"}
_SHM_VOLUME = "kftrain-shm"
_STORAGE_VOLUME = "kftrain-object-store"


@dataclass(frozen=True)
class PodSettings:
    cpu: str = ""
    memory: str = ""
    gpus: int = 0
    shm_size: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    service_account: str = ""
    image_pull_secrets: Sequence[str] = ()
    priority_class: str = ""
    # ENV_NAME -> (secret name, key)
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    storage_secret: str = ""
    # mount path -> PersistentVolumeClaim name
    pvc_mounts: Mapping[str, str] = field(default_factory=dict)
    queue_name: str = ""
    scheduling: SchedulingPolicy | None = None
    ttl_seconds_after_finished: int | None = None

    def secret_refs(self) -> dict[str, dict[str, Any]]:
        """Every variable read from a secret, as its ``secretKeyRef``: ``secret_env``, and the storage secret's
        credentials (optional: a platform may grant object-store access another way, such as a pod identity)."""
        refs = {
            name: {"name": self.storage_secret, "key": key, "optional": True}
            for name, key in STORAGE_SECRET_KEYS.items()
            if self.storage_secret
        }
        return {**refs, **{name: {"name": secret, "key": key} for name, (secret, key) in self.secret_env.items()}}


def apply_pod_settings(job: TrainingJob, settings: PodSettings) -> TrainingJob:
    """A copy of ``job`` with ``settings`` on the job and on every replica's pod and main container."""
    out = copy.deepcopy(job)
    kind = kind_of(out)
    _apply_to_job(out, settings)
    for rtype, rspec in out.replica_specs.items():
        trains = kind.hosts_training(out, rtype)
        pod = rspec.template.spec
        _apply_to_pod(pod, settings, shm=trains)
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
        mounts = {path: name for name, path in _volumes(settings, shm=trains).items()}
        _add_mounts(container, mounts)
    return out


def _apply_to_job(job: TrainingJob, settings: PodSettings) -> None:
    if settings.queue_name:
        job.metadata.labels = {QUEUE_NAME_LABEL: settings.queue_name, **(job.metadata.labels or {})}
    if settings.scheduling is None and settings.ttl_seconds_after_finished is None:
        return
    run_policy = job.spec.run_policy or RunPolicy()
    if settings.scheduling is not None and run_policy.scheduling_policy is None:
        run_policy.scheduling_policy = copy.deepcopy(settings.scheduling)
    if settings.ttl_seconds_after_finished is not None and run_policy.ttl_seconds_after_finished is None:
        run_policy.ttl_seconds_after_finished = settings.ttl_seconds_after_finished
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


def _volumes(settings: PodSettings, *, shm: bool) -> dict[str, str]:
    """Volume name -> mount path, for the main container."""
    mounts: dict[str, str] = {}
    if shm and settings.shm_size:
        mounts[_SHM_VOLUME] = "/dev/shm"
    if settings.storage_secret:
        mounts[_STORAGE_VOLUME] = MOUNTED_CREDENTIALS_DIR
    for path, claim in settings.pvc_mounts.items():
        mounts[pvc_volume_name(claim)] = path
    return mounts


def pvc_volume_name(claim: str) -> str:
    return f"pvc-{claim}"[:63]


def _add_mounts(container: Container, mounts: Mapping[str, str]) -> None:
    """Mount each volume at its path, unless the container already mounts something there."""
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

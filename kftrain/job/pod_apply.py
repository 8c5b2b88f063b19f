"""What each pod setting does to a job: one function per setting, named in its declaration
(:class:`~kftrain.job.pod_settings.PodSettings`). Each fills in only what the job does not already say (a manifest's
own values win, and so does an earlier layer of settings), and does nothing with an empty value.

A replica's function gets the replica's pod and main container and whether it hosts training processes (GPUs and
``/dev/shm`` go only there, never to an MPI launcher that only runs mpirun); a job's function gets the job.
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
from kftrain.job.model import Container, EnvVar, PodSpec, RunPolicy, SchedulingPolicy, TrainingJob
from kftrain.job.security_checks import POD_SECURITY_CONTEXT_FIELDS
from kftrain.job.serde import from_dict

GPU_RESOURCE = "nvidia.com/gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
STORAGE_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "accesskey", "AWS_SECRET_ACCESS_KEY": "secretkey"}
SHM_VOLUME = "kftrain-shm"
STORAGE_VOLUME = "kftrain-object-store"
_ACCELERATOR_HINTS = ("gpu", "tpu", "neuron", "habana", "amd.com", "nvidia.com")


@dataclass
class Replica:
    """One replica type's pod template as a setting changes it."""

    rtype: str
    pod: PodSpec
    container: Container | None  # the main container (None: the kind's contract names none)
    trains: bool  # hosts training processes


# -- the replica's pod --------------------------------------------------------------------------------------------


def node_selector(r: Replica, value: Mapping[str, str], field: str) -> None:
    if value:
        r.pod.node_selector = {**value, **(r.pod.node_selector or {})}


def tolerations(r: Replica, value: Sequence[Mapping[str, Any]], field: str) -> None:
    if value:
        have = list(r.pod.tolerations or [])
        r.pod.tolerations = [*have, *(dict(t) for t in value if dict(t) not in have)]


def service_account(r: Replica, value: str, field: str) -> None:
    if value and not r.pod.service_account_name:
        r.pod.service_account_name = value


def image_pull_secrets(r: Replica, value: Sequence[str], field: str) -> None:
    if value:
        named = {s.get("name") for s in r.pod.image_pull_secrets or []}
        r.pod.image_pull_secrets = [*(r.pod.image_pull_secrets or [])] + [{"name": s} for s in value if s not in named]


def priority_class(r: Replica, value: str, field: str) -> None:
    if value:
        r.pod.extra.setdefault("priorityClassName", value)


def affinity(r: Replica, value: Mapping[str, Any], field: str) -> None:
    """The whole affinity, only on a pod that has none (two affinities do not merge safely)."""
    if value and not r.pod.extra.get("affinity"):
        r.pod.extra["affinity"] = copy.deepcopy(dict(value))


def security_context(r: Replica, value: Mapping[str, Any], field: str) -> None:
    """``value`` on every container and init container that sets none, and its fields a pod's securityContext also
    has on the pod where unset: a container an operator adds (training-operator's ``init-pytorch``) inherits them."""
    if not value:
        return
    pod = r.pod
    init_containers = [c for c in pod.extra.get("initContainers") or [] if isinstance(c, dict)]
    for fields in [c.extra for c in pod.containers] + init_containers:
        fields.setdefault("securityContext", copy.deepcopy(dict(value)))
    shared = {k: copy.deepcopy(v) for k, v in value.items() if k in POD_SECURITY_CONTEXT_FIELDS}
    if shared:
        pod.extra["securityContext"] = {**shared, **(pod.extra.get("securityContext") or {})}


def volumes(r: Replica, value: Sequence[Mapping[str, Any]], field: str) -> None:
    """Volumes given whole: one the pod has (the same name and source) is kept once; another of a name the pod uses
    is a conflict, refused (mounts of it would get the pod's volume)."""
    named = {v.get("name"): v for v in r.pod.extra.get("volumes") or [] if isinstance(v, Mapping)}
    for i, volume in enumerate(value):
        mine = named.get(volume["name"])
        if mine is None:
            _add_volume(r.pod, volume["name"], {k: v for k, v in volume.items() if k != "name"})
        elif dict(mine) != dict(volume):
            raise JobSpecError(
                f"{field}[{i}].name",
                f"{volume['name']!r} is already a volume of the {r.rtype} replicas, with another source: rename the "
                "task's volume (and its mounts)",
            )


# -- the replica's main container ---------------------------------------------------------------------------------


def request_and_limit(resource: str) -> Any:
    """The setting of one resource, as request and limit alike (Guaranteed QoS), unless the container sets either."""

    def apply(r: Replica, value: str, field: str) -> None:
        if not value or r.container is None:
            return
        current = copy.deepcopy(r.container.resources or {})
        requests, limits = dict(current.get("requests") or {}), dict(current.get("limits") or {})
        if resource not in requests and resource not in limits:
            requests[resource] = limits[resource] = value
            r.container.resources = {**current, "limits": limits, "requests": requests}

    return apply


def gpus(r: Replica, value: int, field: str) -> None:
    """An ``nvidia.com/gpu`` limit (Kubernetes takes the request from it), on a training replica only."""
    if not value or not r.trains or r.container is None:
        return
    current = copy.deepcopy(r.container.resources or {})
    limits = dict(current.get("limits") or {})
    if GPU_RESOURCE not in limits:
        r.container.resources = {**current, "limits": {**limits, GPU_RESOURCE: value}}


def resources(r: Replica, value: Mapping[str, Any], field: str) -> None:
    """Requirements given whole: each resource the container does not name (GPU-like ones on training replicas only),
    and each resource claim it lacks."""
    if not value or r.container is None:
        return
    out = copy.deepcopy(dict(r.container.resources or {}))
    for part in check.RESOURCE_SECTIONS:
        given = {
            name: quantity
            for name, quantity in (value.get(part) or {}).items()
            if r.trains or not any(hint in name for hint in _ACCELERATOR_HINTS)
        }
        if given:
            out[part] = {**given, **(out.get(part) or {})}
    claimed = {c.get("name") for c in out.get("claims") or []}
    if any(c["name"] not in claimed for c in value.get("claims") or []):
        out["claims"] = [*(out.get("claims") or []), *(c for c in value["claims"] if c["name"] not in claimed)]
    r.container.resources = out or None


def env(r: Replica, value: Sequence[EnvVar], field: str) -> None:
    """Variables given whole, each one the container does not set."""
    _add_env(r, [copy.deepcopy(var) for var in value])


def secret_env(r: Replica, value: Mapping[str, str], field: str) -> None:
    """``NAME: secret/key`` as ``valueFrom.secretKeyRef``: a credential never appears as a literal value."""
    refs = {name: ref.partition("/") for name, ref in value.items()}
    _add_env(r, [_secret_var(n, {"name": secret, "key": key}) for n, (secret, _, key) in refs.items()])


def storage_secret(r: Replica, value: str, field: str) -> None:
    """The object store's credentials (KFP's ``mlpipeline-minio-artifact`` layout) as ``AWS_*`` by secretKeyRef and,
    mounted read-only, at :data:`MOUNTED_CREDENTIALS_DIR` (for processes that do not inherit the container's env,
    such as MPI ranks started over ssh); optional: a platform may grant access another way."""
    if not value:
        return
    _add_env(r, [_secret_var(n, ref) for n, ref in storage_secret_refs(value).items()])
    _add_volume(r.pod, STORAGE_VOLUME, {"secret": {"secretName": value, "optional": True}})
    _add_mount(r.container, MOUNTED_CREDENTIALS_DIR, STORAGE_VOLUME)


def storage_secret_refs(secret: str) -> dict[str, dict[str, Any]]:
    """The variables ``storage_secret`` sets, each as its ``secretKeyRef``."""
    return {name: {"name": secret, "key": key, "optional": True} for name, key in STORAGE_SECRET_KEYS.items()}


def shm_size(r: Replica, value: str, field: str) -> None:
    """A memory-backed ``/dev/shm`` (PyTorch's data loaders and NCCL need more than the runtime's 64 MiB)."""
    if value and r.trains:
        _add_volume(r.pod, SHM_VOLUME, {"emptyDir": {"medium": "Memory", "sizeLimit": value}})
        _add_mount(r.container, "/dev/shm", SHM_VOLUME)


def pvc_mounts(r: Replica, value: Mapping[str, str], field: str) -> None:
    """Each claim as a volume, mounted at each of its paths."""
    for path, claim in value.items():
        _add_volume(r.pod, pvc_volume_name(claim), {"persistentVolumeClaim": {"claimName": claim}})
        _add_mount(r.container, path, pvc_volume_name(claim))


def volume_mounts(r: Replica, value: Sequence[Mapping[str, Any]], field: str) -> None:
    """Mounts given whole, each at a path the container does not mount; each must name a volume of the pod
    (ValidateVolumeMounts: "Not found" otherwise)."""
    names = {v.get("name") for v in r.pod.extra.get("volumes") or [] if isinstance(v, Mapping)}
    if r.container is not None and value:
        mounts = list(r.container.extra.get("volumeMounts") or [])
        taken = {m.get("mountPath") for m in mounts}
        r.container.extra["volumeMounts"] = mounts + [
            copy.deepcopy(dict(m)) for m in value if m.get("mountPath") not in taken
        ]
    for i, mount in enumerate(value):
        if mount["name"] not in names:
            raise JobSpecError(
                f"{field}[{i}].name",
                f"{mount['name']!r} is not a volume of the {r.rtype} replicas' pods (their volumes: "
                f"{', '.join(sorted(map(str, names))) or 'none'}); add it to the task's volumes",
            )


# -- the job ------------------------------------------------------------------------------------------------------


def queue_name(job: TrainingJob, value: str) -> None:
    """Kueue's ``kueue.x-k8s.io/queue-name`` label."""
    if value:
        job.metadata.labels = {QUEUE_NAME_LABEL: value, **(job.metadata.labels or {})}


def scheduling(job: TrainingJob, value: Mapping[str, Any]) -> None:
    """The operator's ``runPolicy.schedulingPolicy`` (Volcano's queue, minAvailable, priorityClass...)."""
    if value:
        policy = from_dict(SchedulingPolicy, value, "scheduling")
        run_policy = job.spec.run_policy or RunPolicy()
        if run_policy.scheduling_policy is None:
            run_policy.scheduling_policy = policy
        job.spec.run_policy = run_policy


def ttl_seconds_after_finished(job: TrainingJob, value: int) -> None:
    """``runPolicy.ttlSecondsAfterFinished`` (-1: none)."""
    if value >= 0:
        run_policy = job.spec.run_policy or RunPolicy()
        if run_policy.ttl_seconds_after_finished is None:
            run_policy.ttl_seconds_after_finished = value
        job.spec.run_policy = run_policy


# -- shared -------------------------------------------------------------------------------------------------------


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


def _secret_var(name: str, ref: Mapping[str, Any]) -> EnvVar:
    return EnvVar(name=name, value_from={"secretKeyRef": dict(ref)})


def _add_env(r: Replica, added: Sequence[EnvVar]) -> None:
    if r.container is None or not added:
        return
    defined = {e.name for e in r.container.env or []}
    r.container.env = [*(r.container.env or []), *(var for var in added if var.name not in defined)] or None


def _add_volume(pod: PodSpec, name: str, source: Mapping[str, Any]) -> None:
    volumes_ = list(pod.extra.get("volumes") or [])
    if name not in {v.get("name") for v in volumes_}:
        pod.extra["volumes"] = [*volumes_, {"name": name, **copy.deepcopy(dict(source))}]


def _add_mount(container: Container | None, path: str, volume: str) -> None:
    """Mount ``volume`` at ``path`` unless the container already mounts something there (a manifest's own win)."""
    if container is None:
        return
    mounts = list(container.extra.get("volumeMounts") or [])
    if path not in {m.get("mountPath") for m in mounts}:
        read_only = {"readOnly": True} if path == MOUNTED_CREDENTIALS_DIR else {}
        container.extra["volumeMounts"] = [*mounts, {"name": volume, "mountPath": path, **read_only}]

"""The launch task's own pod settings, as KFP's backend passes them through to the job it launches
(``dsl.TaskConfig``, KFP backend 2.15 and later), put on every replica below the explicit launch inputs.

A pipeline author sets them on the launch task as on any task (``task.set_cpu_limit("4")``,
``task.set_accelerator_limit(1)``, ``kubernetes.add_toleration(task, ...)``, ``kubernetes.add_node_selector``,
``task.set_env_variable``, ``kubernetes.mount_pvc``...). The backend's driver resolves them into the task's
``TaskConfig`` (kubeflow/pipelines@2.17.0:backend/src/v2/driver/driver.go, ``getTaskConfigOptions``;
``backend/src/v2/driver/container.go``), and applies to the launch pod itself only the fields the component marks
``apply_to_task`` (never the resources: a GPU asked for the training replicas must not be held by the launcher).

They are inputs like the explicit ones, and checked as those are (:data:`CHECKS`: each field through the function
that checks the launch input it stands beside, or, where no input has one, the API server's rule for the pod field it
fills), when they enter the step and before anything is created; the job they end in is then checked whole
(:func:`~kftrain.job.validate.validate_job`: a request above its limit, an env name a Trainer runtime reserves), every
error saying it came from the task's settings; and each mount the task adds must name a volume the pod has.

Precedence, per field: what the job itself says (a manifest's own values) wins, then the explicit launch inputs
(:class:`~kftrain.job.pod_settings.PodSettings`: ``cpu``, ``gpus``, ``node_selector``...), then the task's
settings fill what is still unset: a resource name, an env name, a node-selector key, a mount path the replica
lacks; tolerations are added; affinity only where the pod has none. A volume is added unless the pod has one of that
name: the same volume is taken as it is, another one of that name is a conflict, refused (its mounts would get the
pod's volume). GPU-like resources go only to the replicas that host training (never an MPI launcher that only runs
mpirun), as ``gpus`` does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import affinity_checks
from kftrain.job import pod_checks as check
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import EnvVar, TrainingJob
from kftrain.job.request import env_input
from kftrain.job.serde import from_dict
from kftrain.job.validate import validate_job

_ACCELERATOR_HINTS = ("gpu", "tpu", "neuron", "habana", "amd.com", "nvidia.com")
FIELD = "task_config"  # how errors name what the task passed


def _env(field: str, value: Any) -> list[EnvVar]:
    """The task's env, each entry as an entry of the ``env`` input is checked (:func:`~kftrain.job.request.env_input`),
    each name once (ValidateEnv would keep only the last)."""
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


# Each field of a TaskConfig and the one function that checks it: the explicit input's where there is one
# (node_selector, tolerations, env; resources as cpu/memory/gpus are, and more: a task may name any resource; mount
# paths as pvc_mounts' are), else the API server's rule for the pod field (:mod:`.pod_checks`, :mod:`.affinity_checks`).
CHECKS: Mapping[str, Callable[[str, Any], Any]] = {
    "resources": check.resources,
    "env": _env,
    "node_selector": check.labels,
    "tolerations": check.tolerations,
    "affinity": affinity_checks.affinity,
    "volumes": check.volumes,
    "volume_mounts": check.volume_mounts,
}


@dataclass(frozen=True)
class TaskSettings:
    """What KFP passed through of the launch task's settings (each empty when the task sets none), checked."""

    resources: Mapping[str, Any] = field(default_factory=dict)
    env: Sequence[EnvVar] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    volumes: Sequence[Mapping[str, Any]] = ()
    volume_mounts: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def from_task_config(cls, config: Any) -> TaskSettings:
        """A ``kfp.dsl.TaskConfig`` (its fields None when the task sets nothing), each field through :data:`CHECKS`."""
        given = {name: getattr(config, name, None) for name in CHECKS}
        return cls(
            **{name: CHECKS[name](f"{FIELD}.{name}", value) for name, value in given.items() if value is not None}
        )

    def __bool__(self) -> bool:
        return any(bool(getattr(self, f)) for f in self.__dataclass_fields__)


def apply_task_settings(job: TrainingJob, task: TaskSettings) -> TrainingJob:
    """A copy of ``job`` with what ``task`` sets filled in on every replica where it is still unset, checked whole."""
    out = copy.deepcopy(job)
    if not task:
        return out
    validate_job(out)  # as it was: what is refused below is the task's
    kind = kind_of(out)
    for rtype, rspec in out.replica_specs.items():
        pod = rspec.template.spec
        if task.node_selector:
            pod.node_selector = {**task.node_selector, **(pod.node_selector or {})}
        if task.tolerations:
            tolerations = list(pod.tolerations or [])
            pod.tolerations = [*tolerations, *(dict(t) for t in task.tolerations if dict(t) not in tolerations)]
        if task.affinity and not pod.extra.get("affinity"):
            pod.extra["affinity"] = copy.deepcopy(dict(task.affinity))
        if task.volumes:
            pod.extra["volumes"] = _volumes(pod.extra.get("volumes") or [], task.volumes, rtype)
        container = main_container(out, rtype)
        if container is None:
            continue
        if task.resources:
            container.resources = _resources(container.resources, task.resources, kind.hosts_training(out, rtype))
        if task.env:
            defined = {e.name for e in container.env or []}
            added = [copy.deepcopy(var) for var in task.env if var.name not in defined]
            container.env = [*(container.env or []), *added] or None
        mounts = list(container.extra.get("volumeMounts") or [])
        taken = {m.get("mountPath") for m in mounts}
        mounts += [copy.deepcopy(dict(m)) for m in task.volume_mounts if m.get("mountPath") not in taken]
        if mounts:
            container.extra["volumeMounts"] = mounts
        _check_mounted(task.volume_mounts, pod.extra.get("volumes") or [], rtype)
    try:
        validate_job(out)  # the job whole: what the task's settings make of it, as the API server and operator see it
    except JobSpecError as exc:
        raise JobSpecError(exc.field, f"{exc.message} (with the launch task's own settings, {FIELD})") from None
    return out


def _volumes(have: Sequence[Mapping[str, Any]], task: Sequence[Mapping[str, Any]], rtype: str) -> list[Any]:
    """The pod's volumes and the task's: a task volume the pod has (the same name and source) is kept once; another
    of a name the pod uses is a conflict, refused (the task's mounts of it would get the pod's volume)."""
    out = list(have)
    named = {v.get("name"): v for v in have if isinstance(v, Mapping)}
    for i, volume in enumerate(task):
        mine = named.get(volume["name"])
        if mine is None:
            out.append(copy.deepcopy(dict(volume)))
        elif dict(mine) != dict(volume):
            raise JobSpecError(
                f"{FIELD}.volumes[{i}].name",
                f"{volume['name']!r} is already a volume of the {rtype} replicas, with another source: rename the "
                "task's volume (and its mounts)",
            )
    return out


def _check_mounted(mounts: Sequence[Mapping[str, Any]], volumes: Sequence[Mapping[str, Any]], rtype: str) -> None:
    """Each of the task's mounts names a volume the pod has (ValidateVolumeMounts: a mount's name must be one of the
    pod's volumes, "Not found" otherwise): its own, the job's or one the launch inputs add."""
    names = {v.get("name") for v in volumes if isinstance(v, Mapping)}
    for i, mount in enumerate(mounts):
        if mount["name"] not in names:
            raise JobSpecError(
                f"{FIELD}.volume_mounts[{i}].name",
                f"{mount['name']!r} is not a volume of the {rtype} replicas' pods (their volumes: "
                f"{', '.join(sorted(map(str, names))) or 'none'}); add it to the task's volumes",
            )


def _resources(current: Mapping[str, Any] | None, task: Mapping[str, Any], trains: bool) -> dict[str, Any] | None:
    out = copy.deepcopy(dict(current or {}))
    for part in check.RESOURCE_SECTIONS:
        given = {
            name: value
            for name, value in (task.get(part) or {}).items()
            if trains or not any(hint in name for hint in _ACCELERATOR_HINTS)
        }
        if given:
            out[part] = {**given, **(out.get(part) or {})}
    claimed = {c.get("name") for c in out.get("claims") or []}
    if any(c["name"] not in claimed for c in task.get("claims") or []):
        out["claims"] = [*(out.get("claims") or []), *(c for c in task["claims"] if c["name"] not in claimed)]
    return out or None

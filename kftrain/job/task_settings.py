"""The launch task's own pod settings, as KFP's backend passes them through to the job it launches
(``dsl.TaskConfig``, KFP backend 2.15 and later), put on every replica below the explicit launch inputs.

A pipeline author sets them on the launch task as on any task (``task.set_cpu_limit("4")``,
``task.set_accelerator_limit(1)``, ``kubernetes.add_toleration(task, ...)``, ``kubernetes.add_node_selector``,
``task.set_env_variable``, ``kubernetes.mount_pvc``...). The backend's driver resolves them into the task's
``TaskConfig`` (kubeflow/pipelines@2.17.0:backend/src/v2/driver/driver.go, ``getTaskConfigOptions``;
``backend/src/v2/driver/container.go``), and applies to the launch pod itself only the fields the component marks
``apply_to_task`` (never the resources: a GPU asked for the training replicas must not be held by the launcher).

Precedence, per field: what the job itself says (a manifest's own values) wins, then the explicit launch inputs
(:class:`~kftrain.job.pod_settings.PodSettings`: ``cpu``, ``gpus``, ``node_selector``...), then the task's
settings fill what is still unset: a resource name, an env name, a node-selector key, a volume name, a mount path
the replica lacks; tolerations are added; affinity only where the pod has none. GPU-like resources go only to the
replicas that host training (never an MPI launcher that only runs mpirun), as ``gpus`` does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import EnvVar, TrainingJob
from kftrain.job.serde import from_dict

_ACCELERATOR_HINTS = ("gpu", "tpu", "neuron", "habana", "amd.com", "nvidia.com")


@dataclass(frozen=True)
class TaskSettings:
    """What KFP passed through of the launch task's settings (each empty when the task sets none)."""

    resources: Mapping[str, Any] = field(default_factory=dict)
    env: Sequence[Mapping[str, Any]] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    volumes: Sequence[Mapping[str, Any]] = ()
    volume_mounts: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def from_task_config(cls, config: Any) -> TaskSettings:
        """A ``kfp.dsl.TaskConfig`` (its fields None when the task sets nothing), checked for shape."""
        settings = cls(
            resources=_mapping("task_config.resources", getattr(config, "resources", None)),
            env=_list("task_config.env", getattr(config, "env", None)),
            node_selector=_mapping("task_config.node_selector", getattr(config, "node_selector", None)),
            tolerations=_list("task_config.tolerations", getattr(config, "tolerations", None)),
            affinity=_mapping("task_config.affinity", getattr(config, "affinity", None)),
            volumes=_list("task_config.volumes", getattr(config, "volumes", None)),
            volume_mounts=_list("task_config.volume_mounts", getattr(config, "volume_mounts", None)),
        )
        for i, var in enumerate(settings.env):
            from_dict(EnvVar, var, f"task_config.env[{i}]")
        return settings

    def __bool__(self) -> bool:
        return any(bool(getattr(self, f)) for f in self.__dataclass_fields__)


def apply_task_settings(job: TrainingJob, task: TaskSettings) -> TrainingJob:
    """A copy of ``job`` with what ``task`` sets filled in on every replica where it is still unset."""
    out = copy.deepcopy(job)
    if not task:
        return out
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
        volumes = list(pod.extra.get("volumes") or [])
        named = {v.get("name") for v in volumes}
        volumes += [copy.deepcopy(dict(v)) for v in task.volumes if v.get("name") not in named]
        if volumes:
            pod.extra["volumes"] = volumes
        container = main_container(out, rtype)
        if container is None:
            continue
        if task.resources:
            container.resources = _resources(container.resources, task.resources, kind.hosts_training(out, rtype))
        if task.env:
            defined = {e.name for e in container.env or []}
            added = [from_dict(EnvVar, var, "task_config.env") for var in task.env if var.get("name") not in defined]
            container.env = [*(container.env or []), *added] or None
        mounts = list(container.extra.get("volumeMounts") or [])
        taken = {m.get("mountPath") for m in mounts}
        mounts += [copy.deepcopy(dict(m)) for m in task.volume_mounts if m.get("mountPath") not in taken]
        if mounts:
            container.extra["volumeMounts"] = mounts
    return out


def _resources(current: Mapping[str, Any] | None, task: Mapping[str, Any], trains: bool) -> dict[str, Any] | None:
    out = copy.deepcopy(dict(current or {}))
    for part in ("requests", "limits"):
        given = {
            name: value
            for name, value in (task.get(part) or {}).items()
            if trains or not any(hint in name for hint in _ACCELERATOR_HINTS)
        }
        if given:
            out[part] = {**given, **(out.get(part) or {})}
    return out or None


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobSpecError(name, f"expected a mapping, got {type(value).__name__}")
    return value


def _list(name: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise JobSpecError(name, f"expected a list of mappings, got {value!r:.80}")
    return value

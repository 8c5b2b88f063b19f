"""Carry what was changed on a TrainJob's resolved pods back into the TrainJob, where the Trainer honours it.

The launch step changes every kind's replica specs alike (:mod:`kftrain.job.pod_settings`), but a TrainJob's are its
runtime's resolved jobs, which the cluster never sees. So the ``node`` container's env goes to ``trainer.env``, its
resources to ``trainer.resourcesPerNode``; what a ``PodSpecPatch`` holds, each container's volume mounts and security
context, and the template's labels and annotations, to one ``runtimePatches`` entry of :data:`MANAGER` per changed
job (Trainer v2.3.0's API). A change the API cannot carry (a priority class, a scheduler name) is refused by name.
"""

from __future__ import annotations

import copy
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.runtime import NODE, Resolved, node_container
from kftrain.job.model import TrainingJob
from kftrain.job.serde import to_dict

MANAGER = "kftrain.io/launch"
# What Trainer v2.3.0's PodSpecPatch and ContainerPatch may set (pkg/apis/trainer/v1alpha1/trainjob_types.go).
POD_PATCH_FIELDS = (
    "affinity",
    "imagePullSecrets",
    "nodeSelector",
    "schedulingGates",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "tolerations",
    "volumes",
)
CONTAINER_PATCH_FIELDS = ("volumeMounts", "securityContext")
# The pod's container lists a PodSpecPatch patches, each a list of ContainerPatch by name.
CONTAINER_LISTS = ("containers", "initContainers")


def carry_changes(job: TrainingJob, spec: dict[str, Any], resolved: Resolved) -> dict[str, Any]:
    """``spec`` (the TrainJob's own) with the changes made to ``job``'s replica specs since ``resolved``."""
    out = copy.deepcopy(spec)
    rp = job.run_policy
    for attr, key in (
        ("scheduling_policy", "schedulingPolicy"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    ):
        if getattr(rp, attr) is not None:
            raise JobSpecError(f"runPolicy.{key}", "a TrainJob has no such field (its runtime's policies decide it)")
    patches = []
    for rjob in resolved.jobs:
        before = rjob.pod_template
        after = to_dict(job.replica_specs[rjob.name].template)
        if after == before:
            continue
        if rjob is resolved.trainer_job:
            _carry_trainer(out, node_container(before) or {}, node_container(after) or {})
        patch = _pod_patch(rjob.name, before, after)
        if patch:
            patches.append(patch)
    if patches:
        mine = {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}}}
        others = [p for p in out.get("runtimePatches") or [] if p.get("manager") != MANAGER]
        out["runtimePatches"] = [*others, mine]
    return out


def _carry_trainer(spec: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> None:
    trainer = spec.setdefault("trainer", {})
    for key in ("image", "command", "args"):
        if after.get(key) != before.get(key) and after.get(key) is not None:
            trainer[key] = copy.deepcopy(after[key])
    had = {e.get("name") for e in before.get("env") or []}
    added = [copy.deepcopy(e) for e in after.get("env") or [] if e.get("name") not in had]
    if added:
        trainer["env"] = [*(trainer.get("env") or []), *added]
    if after.get("resources") != before.get("resources") and after.get("resources"):
        trainer["resourcesPerNode"] = copy.deepcopy(after["resources"])


def _pod_patch(name: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    pod_before, pod_after = before.get("spec") or {}, after.get("spec") or {}
    pod: dict[str, Any] = {}
    for key in sorted(set(pod_before) | set(pod_after)):
        if pod_before.get(key) == pod_after.get(key) or key in CONTAINER_LISTS:
            continue
        if key not in POD_PATCH_FIELDS:
            raise JobSpecError(
                f"runtimePatches.{name}.{key}",
                "a TrainJob cannot set it on its runtime's pods (not in Trainer v2.3.0's PodSpecPatch); "
                "use a runtime that sets it",
            )
        pod[key] = copy.deepcopy(pod_after.get(key))
    for key in CONTAINER_LISTS:
        containers = _container_patches(f"runtimePatches.{name}.{key}", pod_before.get(key), pod_after.get(key))
        if containers:
            pod[key] = containers
    template: dict[str, Any] = {"spec": pod} if pod else {}
    meta_before, meta_after = before.get("metadata") or {}, after.get("metadata") or {}
    if meta_after != meta_before:
        template["metadata"] = copy.deepcopy(meta_after)
    if not template:
        return None
    return {"name": name, "template": {"spec": {"template": template}}}


def _container_patches(field: str, before: Any, after: Any) -> list[dict[str, Any]]:
    """A ContainerPatch for each container of ``after`` whose patchable fields differ from ``before``'s; any other
    change is refused, naming ``field``."""
    old = {c.get("name"): c for c in before or []}
    patches = []
    for c in after or []:
        prior = old.get(c.get("name"), {})
        changed = {k: copy.deepcopy(c[k]) for k in CONTAINER_PATCH_FIELDS if k in c and c.get(k) != prior.get(k)}
        if changed:
            patches.append({"name": c.get("name"), **changed})
        for key in sorted(set(c) - {*CONTAINER_PATCH_FIELDS, "env", "resources"}):
            if c.get(key) != prior.get(key) and not (c.get("name") == NODE and key in ("image", "command", "args")):
                raise JobSpecError(f"{field}.{key}", "a TrainJob cannot change it")
    return patches

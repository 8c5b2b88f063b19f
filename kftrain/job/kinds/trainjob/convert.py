"""Migrate a job of another kind to a Kubeflow Trainer v2 TrainJob, saying what cannot be carried over.

The kind converted decides what it becomes (:class:`TrainerSource`: the trainer replica, runtime, ``numNodes``,
``numProcPerNode``, its own notes); :func:`convert` carries what every conversion shares: the trainer's image,
command, args, env (minus what the runtime's plugin sets) and resources, the pod settings a runtime patch may hold
(manager ``kftrain.io/convert``), ``suspend``, ``managedBy`` and ``activeDeadlineSeconds``; the rest is in the notes.
:meth:`Conversion.check_runtime` refuses a runtime whose ML policy is not the one the job was laid out for.
Trainer's torch plugin sets only the ``PET_*`` variables, so where asked a command that is not ``torchrun`` is started
through ``torchrun --no-python``, which sets ``MASTER_ADDR``, ``RANK`` and ``WORLD_SIZE`` for the program.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.patch import CONTAINER_PATCH_FIELDS, POD_PATCH_FIELDS
from kftrain.job.kinds.trainjob.policies import RESERVED
from kftrain.job.kinds.trainjob.runtime import API_VERSION, CLUSTER_RUNTIME, NODE
from kftrain.job.kinds.trainjob.webhooks import MANAGED_BY
from kftrain.job.model import Container, TrainingJob
from kftrain.job.serde import to_dict

PATCH_MANAGER = "kftrain.io/convert"
_TORCHRUN = ("torchrun",)


@dataclass
class Conversion:
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    policy: str = ""  # the ML policy the TrainJob is laid out for: its runtime must have it

    def check_runtime(self, runtimes: RuntimeCatalog) -> None:
        """Refuse a runtime (from ``runtimes``) whose ML policy is not the one the job was converted for: a
        PyTorchJob's torchrun on an MPI runtime's launcher, or an MPIJob's mpirun where no hostfile is written."""
        ref = self.manifest["spec"]["runtimeRef"]
        runtime = runtimes.find(ref.get("kind", CLUSTER_RUNTIME), ref["name"])
        if self.policy and runtime.framework != self.policy:
            raise JobSpecError(
                "--runtime",
                f"{runtime.kind} {runtime.name!r} ({runtime.source}) has a {runtime.framework} ML policy; the job "
                f"was converted for a {self.policy} runtime: name one with mlPolicy.{self.policy}",
            )


@dataclass
class TrainerSource:
    """What the kind being converted decides: the replica type whose main container becomes the trainer, the runtime,
    the trainer's ``numNodes``/``numProcPerNode``, the env names the runtime's plugin sets, the runtime job a patch
    targets, whether a non-torchrun command goes through torchrun, whether the other replicas must share the
    source's pod template, and the notes only the kind can make."""

    replica_type: str
    container: Container | None
    runtime: str
    trainer: dict[str, Any]
    reserved_env: frozenset[str]
    patched_job: str
    through_torchrun: bool = False  # a torch runtime's: its plugin sets only the PET_* variables torchrun reads
    same_pods: bool = False  # a torch runtime's: every node runs one pod template (a differing one is noted)
    notes: list[str] = field(default_factory=list)

    @property
    def policy(self) -> str:
        """The ML policy the job is laid out for: the one whose plugin sets ``reserved_env``."""
        return next((name for name, names in RESERVED.items() if names == self.reserved_env), "")


def convert(job: TrainingJob, source: TrainerSource) -> Conversion:
    """``job`` as a TrainJob manifest, as ``source`` lays it out, and what it leaves behind."""
    notes = list(source.notes)
    container = source.container
    if container is None:
        raise JobSpecError(f"{source.replica_type}", "has no container to make the trainer from")
    trainer = dict(source.trainer)
    if container.image:
        trainer["image"] = container.image
    command = [*(container.command or []), *(container.args or [])]
    if command and source.through_torchrun and not _is_torchrun(command):
        notes.append(
            "command: started through `torchrun --no-python`: Trainer sets only the PET_* variables torchrun "
            "reads, not the MASTER_ADDR/RANK/WORLD_SIZE the training-operator set"
        )
        trainer["command"] = ["torchrun", "--no-python", *command]
    elif command:
        trainer["command"] = list(container.command or [])
        if container.args:
            trainer["args"] = list(container.args)
    env = []
    for var in container.env or []:
        if var.name in source.reserved_env:
            notes.append(f"env {var.name}: dropped, the runtime sets it (the webhook refuses it in trainer.env)")
        else:
            env.append(to_dict(var))
    if env:
        trainer["env"] = env
    if container.resources:
        trainer["resourcesPerNode"] = copy.deepcopy(container.resources)
    spec: dict[str, Any] = {"runtimeRef": {"name": source.runtime}, "trainer": trainer}
    patch = _pod_patch(job, source, container.name, notes)
    if patch:
        spec["runtimePatches"] = [patch]
    _run_policy(job, spec, notes)
    _differing_replicas(job, source, notes)
    meta = {k: v for k, v in to_dict(job.metadata).items() if k in ("name", "generateName", "namespace", "labels")}
    if job.metadata.annotations:
        meta["annotations"] = dict(job.metadata.annotations)
    manifest = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": meta, "spec": spec}
    return Conversion(manifest, notes, source.policy)


def _is_torchrun(command: list[str]) -> bool:
    words = [w.rsplit("/", 1)[-1] for w in command[:3]]
    return words[0] in _TORCHRUN or words[1:3] == ["-m", "torch.distributed.run"]


def _pod_patch(job: TrainingJob, source: TrainerSource, container_name: str, notes: list[str]) -> dict[str, Any] | None:
    template = to_dict(job.replica_specs[source.replica_type].template)
    pod = template.get("spec") or {}
    out: dict[str, Any] = {k: copy.deepcopy(pod[k]) for k in POD_PATCH_FIELDS if k in pod}
    for key in sorted(set(pod) - {*POD_PATCH_FIELDS, "containers", "restartPolicy"}):
        notes.append(f"pod spec {key}: a runtime patch cannot set it; put it in a runtime of your own")
    for c in pod.get("containers") or []:
        if c.get("name") != container_name:
            notes.append(f"container {c.get('name')}: a sidecar the runtime's node job lacks; not carried over")
            continue
        patched = {k: copy.deepcopy(c[k]) for k in CONTAINER_PATCH_FIELDS if k in c}
        if patched:
            out["containers"] = [{"name": NODE, **patched}]
        for key in sorted(set(c) - {*CONTAINER_PATCH_FIELDS, "name", "image", "command", "args", "env", "resources"}):
            notes.append(f"container {key}: a runtime patch cannot set it; not carried over")
    metadata = template.get("metadata") or {}
    pod_template: dict[str, Any] = {}
    if out:
        pod_template["spec"] = out
    if metadata:
        pod_template["metadata"] = copy.deepcopy(metadata)
    if not pod_template:
        return None
    replicated = {"name": source.patched_job, "template": {"spec": {"template": pod_template}}}
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}}}


def _run_policy(job: TrainingJob, spec: dict[str, Any], notes: list[str]) -> None:
    rp = job.spec.run_policy
    if rp is None:
        return
    if rp.suspend is not None:
        spec["suspend"] = rp.suspend
    if rp.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = rp.active_deadline_seconds
    if rp.managed_by in MANAGED_BY[1:]:
        spec["managedBy"] = rp.managed_by
    elif rp.managed_by is not None:
        notes.append(f"runPolicy.managedBy {rp.managed_by!r}: not a manager of TrainJobs")
    for attr, key in (
        ("backoff_limit", "backoffLimit"),
        ("clean_pod_policy", "cleanPodPolicy"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
        ("scheduling_policy", "schedulingPolicy"),
    ):
        if getattr(rp, attr) is not None:
            notes.append(f"runPolicy.{key}: no TrainJob field; the runtime's JobSet policies decide it")


def _differing_replicas(job: TrainingJob, source: TrainerSource, notes: list[str]) -> None:
    for rtype, rspec in job.replica_specs.items():
        if rspec.restart_policy is not None:
            notes.append(f"{rtype}.restartPolicy {rspec.restart_policy.value}: the runtime's JobSet decides it")
    if not source.same_pods or len(job.replica_specs) < 2:
        return
    kept = to_dict(job.replica_specs[source.replica_type].template)
    for rtype, rspec in job.replica_specs.items():
        if rtype != source.replica_type and to_dict(rspec.template) != kept:
            notes.append(
                f"{rtype}: its pod template differs from the {source.replica_type}'s; every node runs the latter"
            )

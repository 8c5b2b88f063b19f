"""Migrate a PyTorchJob or MPIJob to a Kubeflow Trainer v2 TrainJob, saying what cannot be carried over.

A PyTorchJob becomes a TrainJob on a torch runtime (default ``torch-distributed``): its replicas (Master and
Workers) become ``numNodes``, the main container of the Master (else the first Worker) the ``trainer``
(image, command, args, env, resources as ``resourcesPerNode``), a numeric ``nprocPerNode`` its
``numProcPerNode``. Trainer's torch plugin sets only the ``PET_*`` variables ``torchrun`` reads, not the
``MASTER_ADDR``/``RANK``/``WORLD_SIZE`` the training-operator set; so a command that is not already
``torchrun`` is started through ``torchrun --no-python``, which sets those for the program.

An MPIJob becomes a TrainJob on an MPI runtime whose launcher runs as a node (default
``deepspeed-distributed``): ``numNodes`` = the MPIJob's hosts (Workers, plus the Launcher with
``runLauncherAsWorker``), ``numProcPerNode`` = ``slotsPerWorker``, the Launcher's container the trainer.

The pod settings a runtime patch may carry (node selector, tolerations, affinity, service account, image pull
secrets, volumes, security context, grace period, and each container's volume mounts and security context)
go into ``runtimePatches`` under the manager ``kftrain.io/convert``; ``suspend``, ``managedBy`` (MultiKueue)
and ``activeDeadlineSeconds`` into the TrainJob's spec. Everything else is listed in the notes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds import main_container
from kftrain.job.kinds.trainjob import MANAGED_BY, MPI_RESERVED, TORCH_RESERVED
from kftrain.job.model import JobKind, MPIImplementation, TrainingJob
from kftrain.job.serde import to_dict
from kftrain.job.trainer_runtime import API_VERSION, NODE

PATCH_MANAGER = "kftrain.io/convert"
DEFAULT_RUNTIME = {JobKind.PYTORCHJOB: "torch-distributed", JobKind.MPIJOB: "deepspeed-distributed"}
# What a runtime patch may set on a pod and on a container (TrainJob v1alpha1 PodSpecPatch, ContainerPatch).
_POD_PATCH = ("affinity", "imagePullSecrets", "nodeSelector", "securityContext", "serviceAccountName")
_POD_PATCH_EXTRA = ("terminationGracePeriodSeconds", "tolerations", "volumes", "schedulingGates")
_CONTAINER_PATCH = ("volumeMounts", "securityContext")
_TORCHRUN = ("torchrun",)


@dataclass
class Conversion:
    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def to_trainjob(job: TrainingJob, runtime: str | None = None) -> Conversion:
    """``job`` (a PyTorchJob or MPIJob) as a TrainJob manifest on ``runtime``, and what it leaves behind."""
    if job.kind not in DEFAULT_RUNTIME:
        raise JobSpecError("kind", f"{job.kind.value} cannot be converted to a TrainJob (PyTorchJob and MPIJob can)")
    notes: list[str] = []
    is_mpi = job.kind == JobKind.MPIJOB
    source_type = "Launcher" if is_mpi else ("Master" if "Master" in job.replica_specs else "Worker")
    container = main_container(job, source_type)
    if container is None:
        raise JobSpecError(f"{source_type}", "has no container to make the trainer from")
    trainer: dict[str, Any] = {}
    if is_mpi:
        trainer["numNodes"] = job.replicas_of("Worker") + (1 if job.spec.run_launcher_as_worker else 0)
        trainer["numProcPerNode"] = job.spec.slots_per_worker or 1
        _mpi_notes(job, notes)
    else:
        trainer["numNodes"] = sum(spec.count for spec in job.replica_specs.values())
        _torch_notes(job, trainer, notes)
    if container.image:
        trainer["image"] = container.image
    command = [*(container.command or []), *(container.args or [])]
    if command and not is_mpi and not _is_torchrun(command):
        notes.append(
            "command: started through `torchrun --no-python`: Trainer sets only the PET_* variables torchrun "
            "reads, not the MASTER_ADDR/RANK/WORLD_SIZE the training-operator set"
        )
        trainer["command"] = ["torchrun", "--no-python", *command]
    elif command:
        trainer["command"] = list(container.command or [])
        if container.args:
            trainer["args"] = list(container.args)
    reserved = MPI_RESERVED if is_mpi else TORCH_RESERVED
    env = []
    for var in container.env or []:
        if var.name in reserved:
            notes.append(f"env {var.name}: dropped, the runtime sets it (the webhook refuses it in trainer.env)")
        else:
            env.append(to_dict(var))
    if env:
        trainer["env"] = env
    if container.resources:
        trainer["resourcesPerNode"] = copy.deepcopy(container.resources)
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime or DEFAULT_RUNTIME[job.kind]}, "trainer": trainer}
    patch = _pod_patch(job, source_type, container.name, notes)
    if patch:
        spec["runtimePatches"] = [patch]
    _run_policy(job, spec, notes)
    _differing_replicas(job, source_type, notes)
    meta = {k: v for k, v in to_dict(job.metadata).items() if k in ("name", "generateName", "namespace", "labels")}
    if job.metadata.annotations:
        meta["annotations"] = dict(job.metadata.annotations)
    manifest = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": meta, "spec": spec}
    return Conversion(manifest, notes)


def _is_torchrun(command: list[str]) -> bool:
    words = [w.rsplit("/", 1)[-1] for w in command[:3]]
    return words[0] in _TORCHRUN or words[1:3] == ["-m", "torch.distributed.run"]


def _torch_notes(job: TrainingJob, trainer: dict[str, Any], notes: list[str]) -> None:
    nproc = job.spec.nproc_per_node
    if nproc is not None and nproc.isdigit():
        trainer["numProcPerNode"] = int(nproc)
    elif nproc is not None:
        notes.append(f"nprocPerNode {nproc!r}: Trainer v2.3.0 takes a number; unset, it derives auto itself")
    if job.spec.elastic_policy is not None:
        notes.append("elasticPolicy: Trainer v2.3.0 has no elastic training; the TrainJob has a fixed numNodes")


def _mpi_notes(job: TrainingJob, notes: list[str]) -> None:
    impl = job.spec.mpi_implementation
    if impl not in (None, MPIImplementation.OPENMPI):
        raise JobSpecError("spec.mpiImplementation", f"{impl.value}: Trainer v2.3.0 runs OpenMPI only")
    workers = job.replica_specs.get("Worker")
    image = None
    if workers is not None:
        first = main_container(job, "Worker")
        image = first.image if first else None
    notes.append(
        "Worker pods: the runtime's node job runs its own image and ssh daemon"
        + (f" (your Worker image {image} is not used)" if image else "")
        + "; to run yours, give a TrainingRuntime of your own"
    )
    if job.spec.ssh_auth_mount_path:
        notes.append(f"sshAuthMountPath {job.spec.ssh_auth_mount_path}: the runtime's mlPolicy.mpi decides it")
    if job.spec.launcher_creation_policy is not None:
        notes.append("launcherCreationPolicy: the runtime's dependsOn decides when the launcher starts")


def _pod_patch(job: TrainingJob, rtype: str, container_name: str, notes: list[str]) -> dict[str, Any] | None:
    template = to_dict(job.replica_specs[rtype].template)
    pod = template.get("spec") or {}
    out: dict[str, Any] = {k: copy.deepcopy(pod[k]) for k in (*_POD_PATCH, *_POD_PATCH_EXTRA) if k in pod}
    for key in sorted(set(pod) - {*_POD_PATCH, *_POD_PATCH_EXTRA, "containers", "restartPolicy"}):
        notes.append(f"pod spec {key}: a runtime patch cannot set it; put it in a runtime of your own")
    for c in pod.get("containers") or []:
        if c.get("name") != container_name:
            notes.append(f"container {c.get('name')}: a sidecar the runtime's node job lacks; not carried over")
            continue
        patched = {k: copy.deepcopy(c[k]) for k in _CONTAINER_PATCH if k in c}
        if patched:
            out["containers"] = [{"name": NODE, **patched}]
        for key in sorted(set(c) - {*_CONTAINER_PATCH, "name", "image", "command", "args", "env", "resources"}):
            notes.append(f"container {key}: a runtime patch cannot set it; not carried over")
    metadata = template.get("metadata") or {}
    pod_template: dict[str, Any] = {}
    if out:
        pod_template["spec"] = out
    if metadata:
        pod_template["metadata"] = copy.deepcopy(metadata)
    if not pod_template:
        return None
    rjob = "launcher" if job.kind == JobKind.MPIJOB else NODE
    replicated = {"name": rjob, "template": {"spec": {"template": pod_template}}}
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


def _differing_replicas(job: TrainingJob, source_type: str, notes: list[str]) -> None:
    for rtype, rspec in job.replica_specs.items():
        if rspec.restart_policy is not None:
            notes.append(f"{rtype}.restartPolicy {rspec.restart_policy.value}: the runtime's JobSet decides it")
    if job.kind == JobKind.MPIJOB or len(job.replica_specs) < 2:
        return
    kept = to_dict(job.replica_specs[source_type].template)
    for rtype, rspec in job.replica_specs.items():
        if rtype != source_type and to_dict(rspec.template) != kept:
            notes.append(f"{rtype}: its pod template differs from the {source_type}'s; every node runs the latter")

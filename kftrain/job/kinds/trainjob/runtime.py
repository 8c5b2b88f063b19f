"""Kubeflow Trainer v2 runtimes: find the one a TrainJob names, and resolve what the TrainJob runs on it.

As kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go does: the runtime's JobSet template with each
``runtimePatches`` entry merged in (strategic merge: named lists by name); each replicated job's pod count its
``parallelism``, the trainer's (label ``trainjob-ancestor-step: trainer``) ``numNodes``; the trainer's image, command,
args, env and ``resourcesPerNode`` on that job's ``node`` container. What each ML policy adds per node is
:mod:`.policies`'; the runtimes Trainer installs are :mod:`.builtin`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds.restarts import JOB_DEFAULT_BACKOFF_LIMIT
from kftrain.job.kinds.trainjob.failure_policy import FailurePolicy
from kftrain.job.kinds.trainjob.failure_policy import parse as parse_failure_policy
from kftrain.job.kinds.trainjob.jobset import check_template
from kftrain.job.kinds.trainjob.policies import check_one_policy, policy_of
from kftrain.job.model import RestartPolicy

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME, NAMESPACED_RUNTIME)
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
NODE = "node"  # the trainer's job and container name (pkg/constants: Node)
LAUNCHER = "launcher"  # the MPI launcher's job (pkg/constants: Launcher)
# The initializers' ancestor labels (= their job and container names), and the TrainJob's spec.initializer key of each
# (pkg/constants/constants.go:52-62).
INITIALIZERS = {"dataset-initializer": "dataset", "model-initializer": "model"}
# Where the TrainJob's storageUri reaches an initializer (plugins/jobset/constants/constants.go:25).
STORAGE_URI_ENV = "STORAGE_URI"
# Strategic-merge keys of the lists a runtime patch may touch (Kubernetes' patchMergeKey tags).
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


@dataclass(frozen=True)
class Runtime:
    """A ClusterTrainingRuntime or TrainingRuntime manifest, and where it came from."""

    kind: str
    name: str
    namespace: str | None
    manifest: Mapping[str, Any]
    source: str
    # Whether it came in the job's own file, beside the TrainJob (as ``kubectl apply -f`` takes them).
    bundled: bool = False

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.manifest.get("spec") or {}

    @property
    def ml_policy(self) -> Mapping[str, Any]:
        return self.spec.get("mlPolicy") or {}

    @property
    def framework(self) -> str:
        """The ML policy: ``torch``, ``mpi``, ``jax``, ``xgboost``, ``flux`` or ``plain`` (none set)."""
        return policy_of(self.ml_policy)


def parse_runtime(data: Any, source: str) -> Runtime:
    """A runtime manifest, checked by Trainer's own models (kubeflow-trainer-api) and the shape we rely on."""
    from kubeflow_trainer_api import models

    if not isinstance(data, Mapping) or data.get("kind") not in RUNTIME_KINDS:
        raise JobSpecError(source, f"not a {' or '.join(RUNTIME_KINDS)} manifest")
    if data.get("apiVersion") != API_VERSION:
        raise JobSpecError(f"{source}: apiVersion", f"{data.get('apiVersion')!r}; expected {API_VERSION}")
    model = getattr(models, f"TrainerV1alpha1{data['kind']}")
    try:
        model.from_dict(dict(data))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise JobSpecError(source, f"not a valid {data['kind']}: {' '.join(str(exc).split())[:300]}") from None
    meta = data.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise JobSpecError(f"{source}: metadata.name", "missing")
    # A runtime is a custom resource: the API server holds its name to NameIsDNSSubdomain, and a namespaced one's
    # namespace to a DNS-1123 label (kubernetes/apiextensions-apiserver@v0.36.3:pkg/registry/customresource/
    # validator.go, ValidateObjectMetaAccessor; kubernetes/apimachinery@v0.36.3:pkg/api/validation/generic.go).
    name = check.dns1123_subdomain(f"{source}: metadata.name", name)
    namespace = meta.get("namespace")
    if data["kind"] == NAMESPACED_RUNTIME and namespace is not None and not check.is_dns1123_label(str(namespace)):
        raise JobSpecError(
            f"{source}: metadata.namespace",
            f"{check.shown(namespace)} is not a valid namespace: lower-case letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {check.LABEL_MAX} characters",
        )
    check_one_policy((data.get("spec") or {}).get("mlPolicy") or {}, source)
    template_spec = ((data.get("spec") or {}).get("template") or {}).get("spec") or {}
    if not template_spec.get("replicatedJobs"):
        raise JobSpecError(f"{source}: spec.template.spec.replicatedJobs", "missing or empty")
    check_template(template_spec, f"{data['kind']} {name!r}", f"{source}: spec.template.spec")
    return Runtime(data["kind"], name, namespace, copy.deepcopy(dict(data)), source)


# -- resolution ------------------------------------------------------------------------------------


@dataclass
class ReplicatedJob:
    """One replicated job of the resolved JobSet: its pod count and pod template (as the Trainer builds it), and how
    its Job restarts a pod that fails."""

    name: str
    count: int
    ancestor: str | None
    pod_template: dict[str, Any]
    depends_on: list[dict[str, Any]] = field(default_factory=list)
    # JobSet's webhook makes an unset restartPolicy OnFailure (kubernetes-sigs/jobset@v0.12.0:
    # pkg/webhooks/jobset_webhook.go, Default), so the kubelet restarts a failed node's container in its pod.
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    backoff_limit: int = JOB_DEFAULT_BACKOFF_LIMIT


@dataclass
class Resolved:
    """What a TrainJob runs on its runtime: the replicated jobs in the runtime's order, and the ML policy."""

    runtime: Runtime
    jobs: list[ReplicatedJob]
    ml_policy: dict[str, Any]
    success_targets: list[str]
    failure_policy: FailurePolicy | None = None

    def job(self, name: str) -> ReplicatedJob | None:
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def trainer_job(self) -> ReplicatedJob | None:
        return next((j for j in self.jobs if j.ancestor == TRAINER_ANCESTOR), None)

    @property
    def num_nodes_job(self) -> ReplicatedJob | None:
        """The replicated job whose pod count ``trainer.numNodes`` sets: the MPI policy's ``node`` job (its launcher
        counted among the nodes when it runs as one), else the trainer's."""
        if self.ml_policy.get("mpi") is not None:
            return self.job(NODE)
        return self.trainer_job


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` merged into ``base`` as Kubernetes' strategic merge patch does for the fields runtimes use."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v, k) if k in base and v is not None else copy.deepcopy(v)
        return out
    merge_key = _MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, b in enumerate(out_list) if b.get(merge_key) == item.get(merge_key)), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def resolve(trainjob_spec: Mapping[str, Any], runtime: Runtime) -> Resolved:
    """The replicated jobs and ML policy of a TrainJob's ``spec`` on ``runtime`` (see the module doc)."""
    template_spec = copy.deepcopy(dict(runtime.spec.get("template", {}).get("spec", {})))
    for patch in trainjob_spec.get("runtimePatches") or []:
        jobset_patch = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        if jobset_patch:
            template_spec = strategic_merge(template_spec, jobset_patch)
    ml_policy = copy.deepcopy(dict(runtime.ml_policy))
    trainer = trainjob_spec.get("trainer") or {}
    mpi = ml_policy.get("mpi")
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    jobs: list[ReplicatedJob] = []
    for rjob in template_spec.get("replicatedJobs") or []:
        job_template = rjob.get("template") or {}
        job_spec = job_template.get("spec") or {}
        ancestor = ((job_template.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        count = int(job_spec.get("parallelism", 1))
        if ancestor == TRAINER_ANCESTOR and runtime.ml_policy:
            count = int(ml_policy.get("numNodes", 1))
        pod = copy.deepcopy(job_spec.get("template") or {})
        if ancestor == TRAINER_ANCESTOR:
            _apply_trainer(pod, trainer)
        elif ancestor in INITIALIZERS:
            _apply_initializer(pod, str(ancestor), (trainjob_spec.get("initializer") or {}).get(INITIALIZERS[ancestor]))
        elif launcher_as_node and rjob.get("name") == NODE and trainer.get("resourcesPerNode"):
            _merge_resources(pod, trainer["resourcesPerNode"])
        jobs.append(
            ReplicatedJob(
                str(rjob.get("name")),
                max(count, 1),
                ancestor,
                pod,
                list(rjob.get("dependsOn") or []),
                RestartPolicy((pod.get("spec") or {}).get("restartPolicy") or RestartPolicy.ON_FAILURE),
                _backoff_limit(job_spec),
            )
        )
    success = template_spec.get("successPolicy") or {}
    targets = list(success.get("targetReplicatedJobs") or [j.name for j in jobs])
    # (Read again from the template, which check_template admitted when the runtime was read.)
    failure = parse_failure_policy(template_spec, [j.name for j in jobs], runtime.name, "spec.template.spec")
    resolved = Resolved(runtime, jobs, ml_policy, targets, failure)
    num_nodes = trainer.get("numNodes")
    if num_nodes is not None:
        ml_policy["numNodes"] = num_nodes
        counted = resolved.num_nodes_job
        if counted is not None:
            counted.count = max(num_nodes - 1, 1) if launcher_as_node else num_nodes
    return resolved


def _backoff_limit(job_spec: Mapping[str, Any]) -> int:
    """A replicated Job's backoffLimit as the API server defaults it (kubernetes@v1.36.3:pkg/apis/batch/v1/defaults.go,
    SetDefaults_Job): 6, or the int32 maximum when the Job counts its failures per index instead."""
    given = job_spec.get("backoffLimit")
    if given is not None:
        return int(given)
    return check.INT32_MAX if job_spec.get("backoffLimitPerIndex") is not None else JOB_DEFAULT_BACKOFF_LIMIT


def node_container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == NODE), None)


def _apply_trainer(pod: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    container = node_container(pod)
    if container is None:
        return
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    if trainer.get("env"):
        container["env"] = strategic_merge(container.get("env") or [], trainer["env"], "env")
    if trainer.get("resourcesPerNode"):
        _merge_resources(pod, trainer["resourcesPerNode"])


def _apply_initializer(pod: dict[str, Any], name: str, given: Mapping[str, Any] | None) -> None:
    """The TrainJob's initializer section on the container of that name (plugins/jobset/builder.go:41-102):
    ``STORAGE_URI`` = storageUri, then its env upserted, then its secretRef as the container's ``envFrom`` (the secret's
    keys become variables: credentials by reference, never by value)."""
    container = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), None)
    if container is None or given is None:
        return
    env = container.get("env") or []
    if given.get("storageUri") is not None:
        env = strategic_merge(env, [{"name": STORAGE_URI_ENV, "value": given["storageUri"]}], "env")
    if given.get("env"):
        env = strategic_merge(env, given["env"], "env")
    if env:
        container["env"] = env
    if given.get("secretRef"):
        container["envFrom"] = [*(container.get("envFrom") or []), {"secretRef": {"name": given["secretRef"]["name"]}}]


def _merge_resources(pod: dict[str, Any], per_node: Mapping[str, Any]) -> None:
    """The trainer's resourcesPerNode over the runtime's, per resource name (MergeResourceRequirements)."""
    container = node_container(pod)
    if container is None:
        return
    resources = container.setdefault("resources", {})
    for part in ("limits", "requests"):
        if per_node.get(part):
            resources[part] = {**(resources.get(part) or {}), **per_node[part]}

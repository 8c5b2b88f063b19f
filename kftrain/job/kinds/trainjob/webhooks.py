"""What Kubeflow Trainer v2.3.0's admission webhooks refuse: a TrainJob on its runtime (the TrainJob validator runs
every plugin's ``Validate``: pkg/webhooks/trainjob_webhook.go:107-118, pkg/runtime/core/trainingruntime.go:304-317),
and a TrainingRuntime or ClusterTrainingRuntime itself (pkg/webhooks/trainingruntime_webhook.go).

Each rule cites the file and lines it encodes; the messages are the webhook's own, after the field path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.policies import check_reserved_env, policy_of
from kftrain.job.kinds.trainjob.runtime import (
    ANCESTOR_LABEL,
    GROUP,
    LAUNCHER,
    NODE,
    RUNTIME_KINDS,
    Resolved,
    Runtime,
)

# pkg/constants/constants.go:52-58: the initializers' jobs and containers (one name for both).
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
# plugins/jobset/constants/constants.go:22: the volume (and its mount) the initializers share with the trainer.
INITIALIZER_VOLUME = "initializer"
# pkg/apis/trainer/v1alpha1/trainjob_types.go: spec.managedBy's two values.
MANAGED_BY = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
# The containers whose env a runtime patch must not set (plugins/jobset/jobset.go:203-206).
_NO_PATCHED_ENV = (DATASET_INITIALIZER, MODEL_INITIALIZER, NODE)
# pkg/webhooks/trainingruntime_webhook.go:35-41: the container each ancestor's job must have.
_ANCESTOR_CONTAINER = {"trainer": NODE, MODEL_INITIALIZER: MODEL_INITIALIZER, DATASET_INITIALIZER: DATASET_INITIALIZER}
# charts/kubeflow-trainer/templates/webhook/validating_webhook_configuration.yaml:36-41: a runtime with this label is
# not sent to the runtime webhooks.
_WEBHOOK_DISABLED = ("trainer.kubeflow.org/webhook-validation", "disabled")


def validate_trainjob(spec: Mapping[str, Any], resolved: Resolved) -> None:
    """The TrainJob webhook's rules for ``spec`` on its resolved runtime."""
    ref = spec["runtimeRef"]
    if ref.get("apiGroup", GROUP) != GROUP or ref.get("kind", RUNTIME_KINDS[0]) not in RUNTIME_KINDS:
        # trainjob_webhook.go:111-114: the runtime registry has no such kind.
        raise JobSpecError("spec.runtimeRef", f"must be a {GROUP} {' or '.join(RUNTIME_KINDS)} (unsupported runtime)")
    managed_by = spec.get("managedBy")
    if managed_by is not None and managed_by not in MANAGED_BY:
        raise JobSpecError("spec.managedBy", f"{managed_by!r} must be one of: {', '.join(MANAGED_BY)}")
    trainer = spec.get("trainer") or {}
    for key in ("numNodes", "numProcPerNode"):
        if trainer.get(key) is not None and trainer[key] < 1:
            raise JobSpecError(f"spec.trainer.{key}", f"must be >= 1, got {trainer[key]}")
    policy = policy_of(resolved.runtime.ml_policy)
    check_reserved_env(policy, [e.get("name") for e in trainer.get("env") or []])
    if policy == "torch":
        _validate_env_injection(resolved)
    if policy == "mpi":
        _validate_mpi(trainer, resolved)
    validate_patches(spec, resolved.runtime)
    validate_initializers(spec, resolved)


def _validate_env_injection(resolved: Resolved) -> None:
    """plugins/torch/torch.go:89-107: every envInjection target must name a container of the runtime's jobs."""
    injection = (resolved.ml_policy.get("torch") or {}).get("envInjection") or {}
    for i, target in enumerate(injection.get("targets") or []):
        job = resolved.job(str(target.get("jobName")))
        names = {c.get("name") for part in ("containers", "initContainers") for c in _pod(job)[part]} if job else set()
        for name in target.get("containerNames") or []:
            if name not in names:
                raise JobSpecError(
                    "spec.runtimeRef",
                    f"envInjection target podSet {target.get('jobName')!r} container {name!r} not found in runtime "
                    f"template (mlPolicy.torch.envInjection.targets[{i}])",
                )


def _pod(job: Any) -> dict[str, list[dict[str, Any]]]:
    spec = (job.pod_template.get("spec") or {}) if job is not None else {}
    return {part: list(spec.get(part) or []) for part in ("containers", "initContainers")}


def _validate_mpi(trainer: Mapping[str, Any], resolved: Resolved) -> None:
    mpi = resolved.ml_policy.get("mpi") or {}
    multi_node = (trainer.get("numNodes") or 1) >= 2
    lacks_a_job = resolved.job(LAUNCHER) is None or resolved.job(NODE) is None
    if multi_node and mpi.get("runLauncherAsNode") and lacks_a_job:  # plugins/mpi/mpi.go:88-94
        raise JobSpecError(
            "spec.trainer.numNodes",
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher "
            "and node",
        )
    if mpi.get("mpiImplementation", "OpenMPI") != "OpenMPI":  # plugins/mpi/mpi.go:224-225
        raise JobSpecError(
            "runtime.spec.mlPolicy.mpi.mpiImplementation",
            f"MPI implementation for {mpi.get('mpiImplementation')} doesn't supported (Trainer v2.3.0: OpenMPI only)",
        )


def validate_initializers(spec: Mapping[str, Any], resolved: Resolved) -> None:
    """plugins/jobset/jobset.go:112-170: an initializer the TrainJob configures needs the runtime's job of that name,
    with a container of that name, which mounts the volume named ``initializer``."""
    initializer = spec.get("initializer") or {}
    for key, name, config in (
        ("dataset", DATASET_INITIALIZER, "datasetConfig"),
        ("model", MODEL_INITIALIZER, "modelConfig"),
    ):
        if initializer.get(key) is None:
            continue
        job = resolved.job(name)
        if job is None:
            raise JobSpecError(
                "spec.runtimeRef", f"must have {name} job when trainJob is configured with input {config}"
            )
        container = next((c for c in _pod(job)["containers"] if c.get("name") == name), None)
        if container is None:
            raise JobSpecError("spec.runtimeRef", f"must have container with name - {name} in the {name} job")
        if not any(m.get("name") == INITIALIZER_VOLUME for m in container.get("volumeMounts") or []):
            raise JobSpecError(
                "spec.runtimeRef",
                f"must have volumeMount with name - {INITIALIZER_VOLUME} in container {name} of the {name} job "
                f"(runtime {resolved.runtime.name}, {resolved.runtime.source})",
            )


def validate_patches(spec: Mapping[str, Any], runtime: Runtime) -> None:
    """plugins/jobset/jobset.go:172-209: runtimePatches name only the runtime's jobs and containers, and set no env on
    the trainer's or initializers' containers (the trainer's env belongs in spec.trainer.env)."""
    runtime_template = runtime.spec.get("template", {}).get("spec", {})
    containers = {
        rjob.get("name"): {
            c.get("name")
            for part in ("containers", "initContainers")
            for c in rjob.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}).get(part) or []
        }
        for rjob in runtime_template.get("replicatedJobs") or []
    }
    managers: set[str] = set()
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        path = f"spec.runtimePatches[{i}]"
        manager = patch.get("manager")
        if manager in managers:  # +listMapKey=manager (pkg/apis/trainer/v1alpha1/trainjob_types.go)
            raise JobSpecError(f"{path}.manager", f"{manager!r} is already used by an earlier patch")
        managers.add(manager)
        jobset = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for j, rjob in enumerate(jobset.get("replicatedJobs") or []):
            jpath = f"{path}.trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
            if rjob.get("name") not in containers:
                raise JobSpecError(
                    f"{jpath}.name",
                    f"{rjob.get('name')!r}: must not have replicated job that doesn't exist in the runtime job "
                    f"template (runtime jobs: {', '.join(map(str, containers))})",
                )
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
            for part in ("containers", "initContainers"):
                for k, c in enumerate(pod.get(part) or []):
                    if c.get("name") not in containers[rjob["name"]]:
                        raise JobSpecError(
                            f"{jpath}.template.spec.template.spec.{part}[{k}].name",
                            f"{c.get('name')!r} doesn't exist in the runtime job {rjob['name']}",
                        )
                    if part == "containers" and c.get("env") and c.get("name") in _NO_PATCHED_ENV:
                        raise JobSpecError(
                            f"{jpath}.template.spec.template.spec.containers[{k}].env",
                            f"must not have envs for the {', '.join(_NO_PATCHED_ENV)} containers "
                            "(set the trainer's env in spec.trainer.env)",
                        )


def validate_runtime(runtime: Runtime) -> None:
    """pkg/webhooks/trainingruntime_webhook.go:66-105 (validateReplicatedJobs, both runtime kinds): a job labelled as
    the trainer's or an initializer's has ``replicas`` 1 and the container its ancestor needs. A runtime labelled
    ``trainer.kubeflow.org/webhook-validation: disabled`` is not sent to that webhook."""
    labels = (runtime.manifest.get("metadata") or {}).get("labels") or {}
    if labels.get(_WEBHOOK_DISABLED[0]) == _WEBHOOK_DISABLED[1]:
        return
    jobs: Sequence[Mapping[str, Any]] = runtime.spec.get("template", {}).get("spec", {}).get("replicatedJobs") or []
    for i, rjob in enumerate(jobs):
        template = rjob.get("template") or {}
        ancestor = ((template.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        if ancestor not in _ANCESTOR_CONTAINER:
            continue
        path = f"{runtime.source}: spec.template.spec.replicatedJobs[{i}]"
        replicas = rjob.get("replicas", 1)  # JobSet's default (+kubebuilder:default=1)
        if replicas != 1:
            raise JobSpecError(f"{path}.replicas", f"{replicas!r}: always must be 1")
        pod = (template.get("spec") or {}).get("template", {}).get("spec") or {}
        if not any(c.get("name") == _ANCESTOR_CONTAINER[ancestor] for c in pod.get("containers") or []):
            raise JobSpecError(
                f"{path}.template.spec.template.spec.containers",
                f"must contain the required container for the ancestor: {ancestor}",
            )

"""An executor's ``platforms.kubernetes`` config as a backend release turns it into its task pod.

The config is parsed against the release's own proto (strict from 2.14, lenient at 2.5), then each setting is
applied as the driver applies it; anything else is reported as not modelled. The rules, with their upstream lines,
are in the comment below the imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.kfp_backend import protos
from testbed.kfp_backend.driver import NULL, DagExecution, DriverError, RunContext, resolve_parameter
from testbed.kfp_backend.versions import Backend

# The config is first parsed against the release's own proto (:mod:`testbed.kfp_backend.protos`): strictly from 2.14
# (an unknown field fails the run), leniently at 2.5 (the field is dropped: :func:`Pod.dropped` lists it). Then each
# setting is applied as the driver applies it (C = kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go,
# D = kubeflow/pipelines@2.17.0:backend/src/v2/driver/k8s.go):
#
# - every parameter resolves against the task's parent DAG (C:394, D via container.go:143);
# - a secret, ConfigMap or pull secret name given as a parameter must resolve to a non-empty string
#   (resolveInputParameterStr: C:1671-1690, kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go:501-524);
# - ``nodeSelectorJson`` must resolve to a struct of strings (C:786-796; D:199-222, resolveK8sJsonParameter);
#   ``tolerationJson`` to a struct (one toleration) or a list (C:808-846, D:230-290);
# - ``secretAsEnv`` adds ``secretKeyRef`` variables, ``optional`` only where the proto has it (D:350-356;
#   at 2.5.0 C:893-921 has no such field); ``secretAsVolume`` an optionally missing secret volume (C:858-889);
# - ``imagePullSecret`` appends to the pod's pull secrets (C:993-1017).
#
# From 2.15 a component that lists ``taskConfigPassthroughs`` gets the listed settings in its ``dsl.TaskConfig``
# input, and on its own pod only those marked ``applyToTask`` (kubeflow/pipelines@2.17.0:backend/src/v2/driver/
# driver.go:199-243, getTaskConfigOptions; D:143-150).
#
# Anything else in the config is reported as not modelled, so a new setting shows up here before a cluster.


MODELLED = {
    "secretAsEnv",
    "secretAsVolume",
    "nodeSelector",
    "tolerations",
    "imagePullSecret",
    "podMetadata",
    "imagePullPolicy",
    "fieldPathAsEnv",
    "pvcMount",
}
# TaskConfigPassthroughType enum names, and the pod setting each covers.
PASSTHROUGH_FIELDS = {
    "RESOURCES",
    "ENV",
    "KUBERNETES_AFFINITY",
    "KUBERNETES_TOLERATIONS",
    "KUBERNETES_NODE_SELECTOR",
    "KUBERNETES_VOLUMES",
}


@dataclass
class Pod:
    """What the driver puts in a task pod's spec patch (and, from 2.15, its task config)."""

    env: list[dict[str, Any]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    image_pull_secrets: list[str] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    task_config: dict[str, Any] = field(default_factory=dict)
    # Whether the container's own env (the pipeline spec's) is set on the pod: not when a component passes ENV
    # through without applyToTask (2.17.0:backend/src/v2/driver/driver.go:463-469).
    container_env: bool = True
    dropped: list[str] = field(default_factory=list)  # fields the release's proto does not know (2.5: dropped)


def passthrough_options(component: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(fields passed to the TaskConfig, fields applied to the pod) for ``component`` (getTaskConfigOptions)."""
    passthroughs = component.get("taskConfigPassthroughs") or []
    if not passthroughs:
        return set(), set(PASSTHROUGH_FIELDS)
    to_task = {p["field"] for p in passthroughs}
    on_pod = (PASSTHROUGH_FIELDS - to_task) | {p["field"] for p in passthroughs if p.get("applyToTask")}
    return to_task, on_pod


def build_pod(
    config: dict[str, Any] | None,
    component: dict[str, Any],
    container: dict[str, Any],
    dag: DagExecution,
    task_name: str,
    run: RunContext,
    backend: Backend,
) -> Pod:
    """The pod settings of one task of ``dag`` on ``backend``; a :class:`DriverError` where the driver fails."""
    pod = Pod()
    to_task, on_pod = passthrough_options(component) if backend.task_config else (set(), set(PASSTHROUGH_FIELDS))
    pod.resources = container_resources(container)
    config = config or {}
    if config:
        try:
            protos.parse(backend.kfp_kubernetes, config, strict=backend.strict_platform_parse)
        except Exception as exc:  # json_format.ParseError: the run's workflow is never created
            raise DriverError(f"{task_name}: failed to unmarshal kubernetes config: {exc}") from None
        pod.dropped = protos.dropped_fields(backend.kfp_kubernetes, config)
        config = protos.known_fields(backend.kfp_kubernetes, config)
    unknown = set(config) - MODELLED
    if unknown:
        raise DriverError(f"{task_name}: platform settings {sorted(unknown)} are not modelled by this harness")

    def name_of(spec: dict[str, Any], what: str) -> str:
        if "secretNameParameter" in spec or "configMapNameParameter" in spec:
            param: dict[str, Any] = spec.get("secretNameParameter") or spec["configMapNameParameter"]
            value = resolve_parameter(param, dag, task_name, run)
            if not isinstance(value, str) or value is NULL:
                raise DriverError(f"{task_name}: {what}: expected a string but got {type(value).__name__}")
            if value == "":
                raise DriverError(
                    f"{task_name}: {what}: resolving input parameter with spec {param}. Expected a non-empty string"
                )
            return value
        if spec.get("secretName") or spec.get("configMapName"):
            return str(spec.get("secretName") or spec.get("configMapName"))
        raise DriverError(f"{task_name}: missing either SecretName or SecretNameParameter for {what}")

    env: list[dict[str, Any]] = []
    for spec in config.get("secretAsEnv", []):
        secret = name_of(spec, "secret environment variable")
        for key_to_env in spec.get("keyToEnv", []):
            ref: dict[str, Any] = {"name": secret, "key": key_to_env["secretKey"]}
            if "optional" in spec:
                ref["optional"] = spec["optional"]
            env.append({"name": key_to_env["envVar"], "valueFrom": {"secretKeyRef": ref}})
    for spec in config.get("fieldPathAsEnv", []):
        env.append({"name": spec["name"], "valueFrom": {"fieldRef": {"fieldPath": spec["fieldPath"]}}})
    volumes, mounts = [], []
    for spec in config.get("secretAsVolume", []):
        secret = name_of(spec, "secret volume")
        volumes.append({"name": secret, "secret": {"secretName": secret, "optional": bool(spec.get("optional"))}})
        mounts.append({"name": secret, "mountPath": spec["mountPath"]})
    # pvcMount: a volume named after the claim, mounted at mountPath (2.17.0:backend/src/v2/driver/k8s.go:1113-1165,
    # makeVolumeMountPatch; a deprecated constant name still read); empty name or path refused.
    for spec in config.get("pvcMount", []):
        param = spec.get("pvcNameParameter") or (
            {"runtimeValue": {"constant": spec["constant"]}} if "constant" in spec else None
        )
        claim = resolve_parameter(param, dag, task_name, run) if param is not None else ""
        if not claim or not spec.get("mountPath"):
            raise DriverError(f"{task_name}: failed to mount volume, missing mountpath or pvc name")
        volumes.append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append(
            {
                "name": claim,
                "mountPath": spec["mountPath"],
                **({"subPath": spec["subPath"]} if spec.get("subPath") else {}),
            }
        )
    node_selector: dict[str, str] = {}
    if "nodeSelector" in config:
        spec = config["nodeSelector"]
        if "nodeSelectorJson" in spec:
            value = resolve_parameter(spec["nodeSelectorJson"], dag, task_name, run)
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise DriverError(f"{task_name}: failed to resolve node selector: {value!r} is not a map of strings")
            node_selector = dict(value)
        else:
            node_selector = dict(spec.get("labels", {}))
    tolerations: list[dict[str, Any]] = []
    for spec in config.get("tolerations", []):
        if "tolerationJson" in spec:
            value = resolve_parameter(spec["tolerationJson"], dag, task_name, run)
            if isinstance(value, dict):
                tolerations.append(value)
            elif isinstance(value, list) and all(isinstance(t, dict) for t in value):
                tolerations.extend(value)
            else:
                raise DriverError(f"{task_name}: toleration must be either struct or list type, got {value!r}")
        else:
            keys = {"key": "key", "operator": "operator", "value": "value", "effect": "effect"}
            tolerations.append({k8s: spec[pb] for pb, k8s in keys.items() if spec.get(pb)})
    for spec in config.get("imagePullSecret", []):
        pod.image_pull_secrets.append(name_of(spec, "image pull secret"))
    metadata = config.get("podMetadata", {})
    pod.labels, pod.annotations = dict(metadata.get("labels", {})), dict(metadata.get("annotations", {}))

    pod.container_env = "ENV" in on_pod
    if "ENV" in on_pod:
        pod.env = env
    if "KUBERNETES_NODE_SELECTOR" in on_pod:
        pod.node_selector = node_selector
    if "KUBERNETES_TOLERATIONS" in on_pod:
        pod.tolerations = tolerations
    if "KUBERNETES_VOLUMES" in on_pod:
        pod.volumes, pod.volume_mounts = volumes, mounts
    task_resources = pod.resources
    if "RESOURCES" not in on_pod:
        pod.resources = {}
    if to_task:
        pod.task_config = {
            "resources": task_resources if "RESOURCES" in to_task else {},
            # The container's own env, then the platform config's (2.17.0:backend/src/v2/driver/driver.go:289-298,
            # 463-465; k8s.go:385-390).
            "env": [{"name": e["name"], "value": e.get("value", "")} for e in container.get("env", [])] + env
            if "ENV" in to_task
            else [],
            "nodeSelector": node_selector if "KUBERNETES_NODE_SELECTOR" in to_task else {},
            "tolerations": tolerations if "KUBERNETES_TOLERATIONS" in to_task else [],
            "volumes": volumes if "KUBERNETES_VOLUMES" in to_task else [],
            "volumeMounts": mounts if "KUBERNETES_VOLUMES" in to_task else [],
            "affinity": None,
        }
    return pod


def container_resources(container: dict[str, Any]) -> dict[str, Any]:
    """The container's resources as the driver sets them: limits and requests (C:497-600)."""
    spec = container.get("resources") or {}
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    for key, target, name in (
        ("resourceCpuLimit", limits, "cpu"),
        ("resourceMemoryLimit", limits, "memory"),
        ("resourceCpuRequest", requests, "cpu"),
        ("resourceMemoryRequest", requests, "memory"),
    ):
        if spec.get(key):
            target[name] = spec[key]
    accelerator = spec.get("accelerator") or {}
    kind = accelerator.get("resourceType") or accelerator.get("type")
    count = accelerator.get("resourceCount") or accelerator.get("count")
    if kind and count:
        limits[kind] = str(count)
    return {k: v for k, v in (("limits", limits), ("requests", requests)) if v}

"""Whether the launch step's SIGTERM is its pod's eviction (a drain, a taint, preemption) rather than its run's cancel.

An evicted pod carries the ``DisruptionTarget`` condition before the kubelet signals it (kubernetes/api@v0.36.3:
core/v1/types.go:3532-3534). A cancelled run leaves the pod as it is: KFP sets the workflow's
``activeDeadlineSeconds`` to 0 (kubeflow/pipelines@2.17.0:backend/src/common/util/execution_spec.go:294-301),
``argo stop``/``terminate`` its ``spec.shutdown``, and Argo signals the pod's containers through its executor
(argoproj/argo-workflows@v4.0.5:workflow/controller/exec_control.go:41-49, 57-64; pod/queue.go:55-71). So only the
condition, read off the step's own pod, makes an eviction; a pod merely deleted (its run deleted) is a cancel. The
workflow is the job's owner from its creation (:meth:`KubernetesBackend.prepare`), so the evicted pod's garbage
collection never takes the job, however soon the step is killed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.backends.kubernetes.api import KubeApi, read_json

WORKFLOW_API_VERSION = "argoproj.io/v1alpha1"
# One request, no retries: the kubelet's grace period (30 s by default) bounds what the step has left.
_TIMEOUT_S = 5


@dataclass(frozen=True)
class Eviction:
    """Why the step's pod goes (the condition's reason and message), and its run's workflow as an owner reference."""

    reason: str
    workflow: dict[str, Any]


def workflow_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The Argo Workflow that owns ``pod`` (a step's pod), as an owner reference a job can carry (never its
    controller, never blocking), or None when no workflow owns it."""
    # Argo makes the workflow its pods' controller (argoproj/argo-workflows@v4.0.5:workflow/controller/
    # workflowpod.go:212): the owner the job keeps once this pod is gone.
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    workflow = next(
        (o for o in owners if o.get("kind") == "Workflow" and o.get("apiVersion") == WORKFLOW_API_VERSION), None
    )
    if workflow is None or not workflow.get("uid"):
        return None
    owner = {k: workflow[k] for k in ("apiVersion", "kind", "name", "uid")}
    return {**owner, "controller": False, "blockOwnerDeletion": False}


def read_pod(api: KubeApi, pod_name: str, namespace: str) -> dict[str, Any]:
    return read_json(api.core.read_namespaced_pod, name=pod_name, namespace=namespace, _request_timeout=_TIMEOUT_S)


def eviction_of(api: KubeApi, pod_name: str, namespace: str) -> Eviction | None:
    """The eviction of pod ``pod_name`` (the step's own, which Argo's workflow owns), or None when it is not evicted
    or no workflow owns it. A failed read raises: the caller takes it for a cancel."""
    pod = read_pod(api, pod_name, namespace)
    conditions = (pod.get("status") or {}).get("conditions") or []
    disruption = next(
        (c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None
    )
    workflow = workflow_owner(pod)
    if disruption is None or workflow is None:
        return None
    reason = ": ".join(filter(None, (disruption.get("reason"), disruption.get("message"))))
    return Eviction(reason=reason or "DisruptionTarget", workflow=workflow)

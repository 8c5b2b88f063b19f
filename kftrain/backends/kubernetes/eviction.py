"""Whether the launch step's SIGTERM is its pod's eviction (a drain, a taint, preemption) rather than its run's cancel.

An evicted pod carries the ``DisruptionTarget`` condition before the kubelet signals it (kubernetes/api@v0.36.3:
core/v1/types.go:3532-3534). A cancelled run leaves the pod as it is: KFP sets the workflow's
``activeDeadlineSeconds`` to 0 (kubeflow/pipelines@2.17.0:backend/src/common/util/execution_spec.go:294-301),
``argo stop``/``terminate`` its ``spec.shutdown``, and Argo signals the pod's containers through its executor
(argoproj/argo-workflows@v4.0.5:workflow/controller/exec_control.go:41-49, 57-64; pod/queue.go:55-71). So only the
condition, read off the step's own pod, makes an eviction; a pod merely deleted (its run deleted) is a cancel.
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


def eviction_of(api: KubeApi, pod_name: str, namespace: str) -> Eviction | None:
    """The eviction of pod ``pod_name`` (the step's own, which Argo's workflow owns), or None when it is not evicted
    or no workflow owns it. A failed read raises: the caller takes it for a cancel."""
    pod = read_json(api.core.read_namespaced_pod, name=pod_name, namespace=namespace, _request_timeout=_TIMEOUT_S)
    conditions = (pod.get("status") or {}).get("conditions") or []
    disruption = next(
        (c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None
    )
    # Argo makes the workflow its pods' controller (argoproj/argo-workflows@v4.0.5:workflow/controller/
    # workflowpod.go:212): the owner the job keeps once this pod is gone.
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    workflow = next(
        (o for o in owners if o.get("kind") == "Workflow" and o.get("apiVersion") == WORKFLOW_API_VERSION), None
    )
    if disruption is None or workflow is None or not workflow.get("uid"):
        return None
    reason = ": ".join(filter(None, (disruption.get("reason"), disruption.get("message"))))
    owner = {k: workflow[k] for k in ("apiVersion", "kind", "name", "uid")}
    return Eviction(
        reason=reason or "DisruptionTarget", workflow={**owner, "controller": False, "blockOwnerDeletion": False}
    )

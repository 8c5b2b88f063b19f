"""A node drain is not a cancel, on the real node: the pytorchjob_launch step runs as a pod that an Argo Workflow
owns (as Argo makes a step's pod: the Workflow its controller), under deploy/rbac's Role, waiting on a PyTorchJob
that trains for an hour. Evicted through the Eviction API (what `kubectl drain` calls), its pod gets the
``DisruptionTarget`` condition from kube-apiserver and then SIGTERM from the kubelet: the step says it is evicted
and leaves the job running, owned by the workflow, so kube-controller-manager's garbage collector keeps the job
when the pod is gone (it drops only the pod's owner reference) and deleting the run still collects it. Deleted
plainly (the run deleted), the same pod gets SIGTERM alone and the step deletes its job.

The fixture has no Argo: a minimal Workflow CRD (argoproj.io/v1alpha1, as the pod's owner reference names it) and
one Workflow object make the owner real, so the garbage collector sees the owner exist."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, watch

from testbed.controlplane import node_launch, node_pods
from testbed.controlplane.cluster import ControlPlane

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "drain"
WORKFLOWS = {"group": "argoproj.io", "version": "v1alpha1", "plural": "workflows"}
# The shape of Argo's Workflow CRD that an owner reference needs (group, version, kind, plural, namespaced).
WORKFLOW_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "workflows.argoproj.io"},
    "spec": {
        "group": "argoproj.io",
        "names": {"kind": "Workflow", "listKind": "WorkflowList", "plural": "workflows", "singular": "workflow"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}
# A replica that trains for an hour: the step is still waiting on it when its pod goes. Its word is joined when it
# runs, so the step's log has it whole only once the step streams the replica's log (the step echoes its inputs).
TRAINS = "import time\nprint('replica' + '-trains', flush=True)\ntime.sleep(3600)\n"


@dataclass
class Bed:
    core: Any
    custom: Any


@pytest.fixture(scope="module")
def bed(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    with node_cluster.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespace({"metadata": {"name": NS}})
        node_launch.share(api_client, tmp_path_factory.mktemp("drain"), NS)
        extensions = client.ApiextensionsV1Api(api_client)
        extensions.create_custom_resource_definition(WORKFLOW_CRD)
        node_launch.wait_until("the Workflow CRD established", lambda: _established(extensions), 60)
        yield Bed(core, client.CustomObjectsApi(api_client))


def _established(extensions: Any) -> bool:
    crd = extensions.read_custom_resource_definition("workflows.argoproj.io")
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


def _workflow(bed: Bed, name: str) -> dict[str, Any]:
    wf = bed.custom.create_namespaced_custom_object(
        namespace=NS,
        body={"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name}},
        **WORKFLOWS,
    )
    meta = wf["metadata"]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": meta["name"], "uid": meta["uid"]}


def _start_step(bed: Bed, run: str) -> tuple[str, dict[str, Any], node_launch.FollowedLog, dict[str, Any]]:
    """Run `run`'s launch step as a pod its Workflow owns and wait until the step streams its job's training:
    the pod's name, the workflow's owner reference, the step's followed log and its job."""
    owner = _workflow(bed, run)
    name = f"{run}-launch"
    manifest = node_launch.step_pod(
        name,
        run,
        0,
        TRAINS,
        inputs={"timeout_seconds": 900},
        metadata={"ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}]},
        terminationGracePeriodSeconds=30,
    )
    bed.core.create_namespaced_pod(NS, manifest)
    log = node_launch.follow(bed.core, name, NS)
    node_launch.wait_until(f"{name} streams its job's training", lambda: "replica-trains" in log.text(), 180)
    jobs = node_launch.jobs_of(bed.custom, run, NS)
    assert len(jobs) == 1, (jobs, log.text())
    return name, owner, log, jobs[0]


def _last_state(bed: Bed, name: str, resource_version: str) -> tuple[Any, list[str]]:
    """Watch pod ``name`` from ``resource_version`` until it is deleted: its main container's last state (the
    DELETED event carries the status the kubelet wrote last) and its true conditions' types."""
    stream = watch.Watch().stream(
        bed.core.list_namespaced_pod,
        NS,
        field_selector=f"metadata.name={name}",
        resource_version=resource_version,
        timeout_seconds=120,
    )
    for event in stream:
        if event["type"] == "DELETED":
            pod = event["object"]
            true = [c.type for c in pod.status.conditions or [] if c.status == "True"]
            return node_pods.terminated(pod), true
    raise AssertionError(f"pod {name} not deleted within 120 s")


def _job(bed: Bed, name: str) -> dict[str, Any] | None:
    try:
        return bed.custom.get_namespaced_custom_object(namespace=NS, name=name, **node_launch.PYTORCHJOBS)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_an_evicted_step_leaves_its_job_running_to_the_workflow(bed: Bed) -> None:
    name, owner, log, job = _start_step(bed, "drain-1")
    job_name = job["metadata"]["name"]
    version = bed.core.read_namespaced_pod(name, NS).metadata.resource_version
    # policy/v1 Eviction: kube-apiserver writes DisruptionTarget on the pod, then deletes it with its grace period
    # (kubernetes@v1.36.3:pkg/registry/core/pod/storage/eviction.go:317-356, addConditionAndDeletePod).
    bed.core.create_namespaced_pod_eviction(
        name, NS, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
    )
    began = time.monotonic()
    state, conditions = _last_state(bed, name, version)
    said = log.text(timeout_s=30)
    assert "DisruptionTarget" in conditions, conditions
    print(f"evicted pod gone in {time.monotonic() - began:.1f} s, last state {state}\n{said[-3000:]}")
    assert "received SIGTERM" in said, said
    assert f"pod {name} is evicted (EvictionByEvictionAPI: Eviction API: evicting)" in said, said
    assert "left running for the step's retry to reattach" in said, said
    assert state is not None and state.exit_code == 143, state

    # The pod is gone; the garbage collector drops its owner reference from the job and keeps the job: the workflow
    # still owns it.
    def only_the_workflow() -> Any:
        current = _job(bed, job_name)
        owners = (current or {}).get("metadata", {}).get("ownerReferences") or []
        return current if [o["uid"] for o in owners] == [owner["uid"]] else None

    kept = node_launch.wait_until("the job owned by the workflow alone", only_the_workflow, 90)
    assert kept["metadata"].get("deletionTimestamp") is None, kept
    # Deleting the run (its workflow) still collects the job.
    bed.custom.delete_namespaced_custom_object(namespace=NS, name=owner["name"], **WORKFLOWS)
    node_launch.wait_until("the job collected with its workflow", lambda: _job(bed, job_name) is None, 90)


def test_a_deleted_step_deletes_its_job(bed: Bed) -> None:
    """A cancel as a deleted run makes it: the step's pod deleted, no condition on it. The step deletes the job
    itself within its grace period (the garbage collector would only once the pod object is gone)."""
    name, owner, log, job = _start_step(bed, "drain-2")
    job_name = job["metadata"]["name"]
    version = bed.core.read_namespaced_pod(name, NS).metadata.resource_version
    bed.core.delete_namespaced_pod(name, NS)
    state, conditions = _last_state(bed, name, version)
    said = log.text(timeout_s=30)
    assert "DisruptionTarget" not in conditions, conditions
    print(f"deleted pod's last state {state}\n{said[-3000:]}")
    assert "received SIGTERM" in said and "is evicted" not in said, said
    assert f"deleted PyTorchJob {NS}/{job_name}" in said, said
    assert state is not None and state.exit_code == 143, state
    node_launch.wait_until("the job deleted", lambda: _job(bed, job_name) is None, 60)
    bed.custom.delete_namespaced_custom_object(namespace=NS, name=owner["name"], **WORKFLOWS)

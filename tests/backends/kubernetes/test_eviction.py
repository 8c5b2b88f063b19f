"""A SIGTERM while the launch step waits: its pod's eviction (the ``DisruptionTarget`` condition on the step's own
pod, which Argo's workflow owns) leaves the job running, owned by the workflow too, for the retried step to reattach;
anything else (a cancelled run, whose pod carries no such condition; a pod that cannot be read) deletes it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kftrain.backends.base import JobLeftRunning
from kftrain.signals import Terminated
from testbed.fake_k8s import FakeKube, OperatorSim
from testbed.k8s_harness import make_backend, pytorch_job, s_forever, stamped

STEP_POD, STEP_UID = "run-1-launch-1", "uid-step-1"
WORKFLOW = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-1", "uid": "uid-wf-1"}
EVICTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}


def step_pod(*conditions: dict[str, Any], owners: tuple[dict[str, Any], ...] = (WORKFLOW,)) -> dict[str, Any]:
    """The launch step's own pod, as Argo creates it (its workflow its controller) and the cluster then marks it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": STEP_POD,
            "namespace": "default",
            "uid": STEP_UID,
            "ownerReferences": [{**o, "controller": True, "blockOwnerDeletion": True} for o in owners],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, *conditions]},
    }


def sigterm_while_waiting(kube: FakeKube, operator: OperatorSim) -> tuple[Terminated, str]:
    """Run a job as the step in pod STEP_POD and send this process SIGTERM once its master's log streams: what
    ``run`` raised, and what it printed."""
    operator.scenario = s_forever
    backend, out = make_backend(kube, owner_pod_name=STEP_POD, owner_pod_uid=STEP_UID)

    def signal_when_streaming() -> None:
        end = time.monotonic() + 30
        while "[master-0] step" not in out.getvalue() and time.monotonic() < end:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=signal_when_streaming, daemon=True)
    sender.start()
    with pytest.raises(Terminated) as raised:
        backend.run(stamped(pytorch_job(), "run-1", "train"))
    sender.join()
    return raised.value, out.getvalue()


def test_an_evicted_step_leaves_its_job_to_the_retry(kube: FakeKube, operator: OperatorSim) -> None:
    kube.add_pod(step_pod(EVICTED))
    exc, out = sigterm_while_waiting(kube, operator)
    assert isinstance(exc, JobLeftRunning), out
    assert exc.exit_code == 143
    assert f"pod {STEP_POD} is evicted (EvictionByEvictionAPI: Eviction API: evicting)" in exc.left_running
    (job,) = kube.jobs_of("pytorchjobs")
    assert kube.deletions == []
    # Its evicted pod's garbage collection leaves it to the workflow, which deleting the run still collects.
    owners = {o["uid"]: o for o in job["metadata"]["ownerReferences"]}
    assert set(owners) == {STEP_UID, WORKFLOW["uid"]}
    assert owners[WORKFLOW["uid"]] == {**WORKFLOW, "controller": False, "blockOwnerDeletion": False}
    # Argo's retry of the step, in a new pod, reattaches to the same job.
    retry, retry_out = make_backend(kube, owner_pod_name="run-1-launch-2", owner_pod_uid="uid-step-2")
    handle = retry.submit(stamped(pytorch_job(), "run-1", "train"))
    assert handle.uid == job["metadata"]["uid"]
    assert "reattached" in retry_out.getvalue()
    retry.cancel(handle)  # ends the simulated training


def test_the_job_is_owned_by_its_runs_workflow_from_its_creation(kube: FakeKube, operator: OperatorSim) -> None:
    """A step killed before it reads its eviction (a KFP pod's emissary ends with the launcher, about a second after
    the SIGTERM: docs/control-plane-findings.md N12) still leaves the job to the workflow, not to the evicted pod's
    garbage collection."""
    kube.add_pod(step_pod())
    backend, _ = make_backend(kube, owner_pod_name=STEP_POD, owner_pod_uid=STEP_UID)
    handle = backend.submit(stamped(pytorch_job(), "run-1", "train"))
    (job,) = kube.jobs_of("pytorchjobs")
    owners = {o["uid"]: o for o in job["metadata"]["ownerReferences"]}
    assert set(owners) == {STEP_UID, WORKFLOW["uid"]}
    assert owners[WORKFLOW["uid"]] == {**WORKFLOW, "controller": False, "blockOwnerDeletion": False}
    backend.cancel(handle)


def test_a_step_pod_no_workflow_owns_anchors_the_job_alone(kube: FakeKube, operator: OperatorSim) -> None:
    kube.add_pod(step_pod(owners=()))
    backend, _ = make_backend(kube, owner_pod_name=STEP_POD, owner_pod_uid=STEP_UID)
    handle = backend.submit(stamped(pytorch_job(), "run-1", "train"))
    assert [o["uid"] for o in kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]] == [STEP_UID]
    backend.cancel(handle)


CANCELS: dict[str, Callable[[FakeKube], None]] = {
    # A cancelled run (KFP: the workflow's activeDeadlineSeconds 0; argo stop: its shutdown): Argo signals the
    # container, the pod carries no disruption condition.
    "run cancelled": lambda kube: kube.add_pod(step_pod()),
    "condition not true": lambda kube: kube.add_pod(step_pod({**EVICTED, "status": "False"})),
    # Not a pod of a workflow: no retry can reattach.
    "no workflow owns the pod": lambda kube: kube.add_pod(step_pod(EVICTED, owners=())),
    # Cannot tell (the pod cannot be read): today's cancel.
    "pod not found": lambda kube: None,
}


@pytest.mark.parametrize("case", list(CANCELS))
def test_any_other_sigterm_deletes_the_job(case: str, kube: FakeKube, operator: OperatorSim) -> None:
    CANCELS[case](kube)
    exc, out = sigterm_while_waiting(kube, operator)
    assert not isinstance(exc, JobLeftRunning), out
    assert exc.exit_code == 143
    assert kube.jobs_of("pytorchjobs") == [], out
    assert len(kube.deletions) == 1
    if case == "pod not found":
        assert f"could not tell an eviction of pod {STEP_POD} from a cancel (HTTP 404" in out

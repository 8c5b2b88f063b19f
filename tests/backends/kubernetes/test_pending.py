"""A job the Kubernetes backend waits on before it runs: held by Kueue, a Volcano gang still gathering, an image
that cannot be pulled (the rest of what keeps pods Pending is a row of tests/backends/kubernetes/test_outcomes.py).
The backend waits on a virtual clock (testbed/clock.py): a wait longer than a timeout is the scenario moving the time.
"""

from __future__ import annotations

import io
import itertools
from typing import Any

from kftrain.backends.base import JobPhase
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import JobRef
from kftrain.backends.kubernetes.pending import PendingTracker
from kftrain.backends.kubernetes.pod_state import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from kftrain.job import PodSettings, apply_pod_settings
from testbed.clock import VirtualClock
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim, kueue_webhook
from testbed.k8s_harness import (
    make_backend,
    pytorch_job,
    running,
    s_image_pull,
    s_suspended_forever,
    succeed,
    until_said,
)


def test_a_job_held_by_kueue_is_waited_on_until_admitted(
    kube: FakeKube, operator: OperatorSim, virtual_clock: VirtualClock
) -> None:
    kube.admission.append(kueue_webhook)
    backend, out = make_backend(kube, pending_timeout_s=0.5)
    waiting = "digits: waiting: suspended until Kueue admits it from LocalQueue 'team-a' (no pods until then)"

    def scenario(sim: JobSim) -> None:
        sim.condition("Created")
        assert sim.suspended  # Kueue's webhook suspended it at creation
        sim.report_suspended()
        until_said(sim, out, waiting)
        sim.report_suspended()  # the operator's status updates change nothing the backend reports
        virtual_clock.advance(0.6)  # queued longer than pending_timeout_s: a queue is no pending pod
        assert virtual_clock.settle(unless=lambda: not sim.alive), "a queued job was given up on"
        sim.admit_from_queue()
        sim.report_resumed()
        until_said(sim, out, "digits: resumed: no longer suspended")
        running(sim)
        succeed(sim)

    operator.scenario = scenario
    result = backend.run(apply_pod_settings(pytorch_job(), PodSettings(queue_name="team-a")), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())
    assert out.getvalue().count(waiting) == 1
    assert kube.created[0]["spec"]["runPolicy"]["suspend"] is True


def test_a_job_suspended_past_the_timeout_says_what_it_waited_for(
    kube: FakeKube, operator: OperatorSim, virtual_clock: VirtualClock
) -> None:
    kube.admission.append(kueue_webhook)
    operator.scenario = s_suspended_forever
    backend, out = make_backend(kube)
    job = apply_pod_settings(pytorch_job(), PodSettings(queue_name="team-a"))
    # The step's timeout runs once the step has seen the job held, tick by tick, until the step deletes it.
    with virtual_clock.ticking(
        lambda: "waiting: suspended" in out.getvalue(), lambda: not kube.jobs_of("pytorchjobs"), 0.1
    ):
        result = backend.run(job, timeout=0.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout")
    assert "suspended until Kueue admits it from LocalQueue 'team-a'" in result.message
    assert kube.jobs_of("pytorchjobs") == []


def test_a_volcano_gang_still_gathering_is_waited_on(
    kube: FakeKube, operator: OperatorSim, virtual_clock: VirtualClock
) -> None:
    """Volcano's words on a gang's members while it cannot place them all: waited on, and said once."""
    backend, out = make_backend(kube, pending_timeout_s=0.5)

    def scenario(sim: JobSim) -> None:
        with sim.at_once():  # the pods with Volcano's verdict on them: the step never sees them without it
            sim.create_pods(scheduled=False)
            sim.condition("Created")
            n = len(sim.labels())
            for label in sim.labels():
                sim.unschedulable(
                    label, f"pod group is not ready, {n} Pending, {n} minAvailable; Pending: {n} Undetermined"
                )
        until_said(sim, out, "waiting for their Volcano gang to be complete")
        for label in sim.labels():  # the gang forms: Volcano rewrites every member's condition
            sim.unschedulable(
                label,
                f"pod group is not ready, {n} Pending, {n} minAvailable; Pending: 1 Schedulable, {n - 1} Undetermined",
            )
        virtual_clock.advance(0.8)  # longer than pending_timeout_s
        assert virtual_clock.settle(unless=lambda: not sim.alive), "a gang still gathering was given up on"
        sim.schedule()
        sim.start()
        sim.condition("Running")
        succeed(sim)

    operator.scenario = scenario
    result = backend.run(pytorch_job(workers=2), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())
    said = [line for line in out.getvalue().splitlines() if "Volcano gang" in line]
    # Said once, when the wait begins, naming the members seen waiting by then (the pod watch may show the
    # first member's change before the others').
    assert len(said) == 1, said
    members, _, rest = said[0].removeprefix("[kftrain] ").partition(": ")
    assert members and set(members.split(", ")) <= {"master-0", "worker-0", "worker-1"}, said
    assert rest == (
        "waiting for their Volcano gang to be complete: pod group is not ready, 3 Pending, 3 minAvailable; "
        "Pending: 3 Undetermined (the step waits up to its timeout)"
    )


def test_an_image_that_cannot_be_pulled_fails_at_once_naming_it(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_image_pull
    backend, _ = make_backend(kube, pending_timeout_s=None)  # no pending limit: a broken image fails anyway
    result = backend.run(pytorch_job(), timeout=None)
    # ErrImagePull, then ImagePullBackOff: it fails on whichever the pod watch delivers first, naming the image.
    assert result.phase == JobPhase.FAILED and result.reason in ("ErrImagePull", "ImagePullBackOff")
    said = {"ErrImagePull": "failed to pull and unpack image", "ImagePullBackOff": "Back-off pulling image"}
    assert "image example.com/train:1" in result.message and said[result.reason] in result.message
    assert "training-operator adds" not in result.message  # the job's own container: its manifest is the fix
    assert result.failed_replica == "worker-0" and kube.jobs_of("pytorchjobs") == []


def test_an_operator_added_image_that_cannot_be_pulled_names_the_operators_setting(
    kube: FakeKube, operator: OperatorSim
) -> None:
    """A cluster that cannot reach Docker Hub cannot pull ``alpine:3.10``, the image training-operator v1.9.0 gives
    the ``init-pytorch`` it adds to each Worker of a PyTorchJob with a Master. The job's manifest cannot change it:
    the step fails at once naming the container, its image and the operator's flag that sets it."""

    def init_image_pull(sim: JobSim) -> None:
        sim.create_pods()
        sim.condition("Created")
        sim.image_pull_backoff("worker-0", container="init-pytorch")
        sim.wait_deleted()

    operator.scenario = init_image_pull
    backend, _ = make_backend(kube, pending_timeout_s=None)
    result = backend.run(pytorch_job(), timeout=None)
    assert result.phase == JobPhase.FAILED and result.reason in ("ErrImagePull", "ImagePullBackOff"), result
    assert result.failed_replica == "worker-0"
    assert "cannot start: " in result.message and "container init-pytorch, image alpine:3.10" in result.message
    assert "container init-pytorch: training-operator adds it" in result.message, result.message
    assert "--pytorch-init-container-image (default alpine:3.10" in result.message, result.message


def test_the_pending_timeout_is_acted_on_at_the_time_the_tracker_names(kube: FakeKube) -> None:
    """The backend's wait sleeps until the tracker's next_check and then updates it: a next check the update does
    not give up at has the wait look again at once, and on the virtual clock, which stays there, for ever (the row
    "no scheduler" of test_outcomes.py failed so whenever its pods were first seen at the second tick). The times are
    the virtual clock's, ticks of 0.1 added up: the pod first seen at 0.2, its 0.5 s due at 0.2 + 0.5 == 0.7."""
    ticks = list(itertools.accumulate([0.1] * 10))
    seen, due = ticks[1], ticks[6]
    assert seen + 0.5 == due and due - seen < 0.5  # what a difference of the two would get wrong
    backend, _ = make_backend(kube)  # the API to read the pods and the autoscaler's events again when overdue
    job = JobRef.make("PyTorchJob", "kubeflow.org/v1", "digits", "default")
    tracker = PendingTracker(backend.api, Console(io.StringIO()), job, 0.5, recheck_s=0.05)
    pod = _pending_pod(job)
    kube.add_pod(pod)
    for now in ticks[1:]:
        result = tracker.update([pod], now)
        if result is not None:
            break
        assert tracker.next_check is not None and tracker.next_check > now, (now, tracker.next_check)
    assert result is not None and now == due, (now, result)
    assert result.reason == "NotScheduled" and "stayed Pending" in result.message


def _pending_pod(job: JobRef, conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Worker pod of ``job`` no scheduler has looked at yet (no PodScheduled condition), or with ``conditions``."""
    labels = {job.pod_label: job.name, REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "0"}
    meta = {"name": f"{job.name}-worker-0", "namespace": job.namespace, "uid": "u-1", "labels": labels}
    return {"metadata": meta, "spec": {}, "status": {"phase": "Pending", "conditions": conditions or []}}


def test_a_pending_wait_is_judged_on_the_pods_as_the_api_server_has_them_before_the_job_is_given_up(
    kube: FakeKube,
) -> None:
    """The step's pod watch still shows a pod as created (no scheduler has looked at it), while the API server
    already has kube-scheduler's verdict (Unschedulable) and the autoscaler a scale-up for it: the wait is overdue on
    the watch's view, but before giving up the tracker reads the pods again, and waits on for the new node. On the
    watch's view alone it deleted a job a node was being added for (a scenario's clock moved past the pending timeout
    before a loaded machine's watch delivered the pods' next state)."""
    backend, _ = make_backend(kube)
    job = JobRef.make("PyTorchJob", "kubeflow.org/v1", "digits", "default")
    out = io.StringIO()
    tracker = PendingTracker(backend.api, Console(out), job, 0.5, recheck_s=10.0)
    as_watched = _pending_pod(job)
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
    kube.add_pod(_pending_pod(job, [unschedulable]))
    kube.add_event("default", "Pod", "digits-worker-0", "TriggeredScaleUp", "pod triggered scale-up", type_="Normal")
    assert tracker.update([as_watched], 0.0) is None
    assert tracker.update([as_watched], 0.5) is None, "gave up on a pod a node is being added for"
    assert "waiting for the cluster autoscaler to add a node: pod triggered scale-up" in out.getvalue()
    # And with no scale-up, on the API server's view too: the pending timeout holds, with the scheduler's words.
    kube.delete_pod("default", "digits-worker-0")
    kube.add_pod(_pending_pod(job, [unschedulable]))
    late = PendingTracker(backend.api, Console(io.StringIO()), job, 0.5, recheck_s=10.0)
    kube.events.clear()
    assert late.update([as_watched], 1.0) is None
    result = late.update([as_watched], 1.5)
    assert result is not None and result.reason == "Unschedulable" and "0/3 nodes" in result.message, result

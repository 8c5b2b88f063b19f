"""The Kubernetes backend's run, one row per thing the cluster can do: the operator's scenario, the verdict, what
the backend prints and whether it deleted the job.

Each scenario is played by the simulated operator (testbed/fake_k8s) that creates pods with the operators' labels
and moves the job through its conditions; the backend only sees HTTP (testbed/k8s_harness.py). The backend waits on
a virtual clock (testbed/clock.py): a case's timeout passes tick by tick once the cluster is in the state it bounds.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kftrain.backends.base import JobPhase, JobResult
from kftrain.job.naming import stamp_run_identity
from testbed.clock import VirtualClock
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import (
    make_backend,
    pytorch_job,
    running,
    s_forever,
    s_image_pull,
    s_success,
    s_suspended_forever,
    succeed,
)


def s_failed_pod_deleted(sim: JobSim) -> None:
    """As training-operator v1.9.0 does with backoffLimit 0 (tests/controlplane/test_operator_endings.py): the failed
    pod is deleted as the job is marked Failed, so no pod listed after the end shows its exit code."""
    running(sim)
    sim.log("worker-0", "Traceback (most recent call last):", "RuntimeError: CUDA out of memory")
    sim.sleep(0.1)
    sim.exit("worker-0", 3)
    sim.sleep(0.2)  # the step's pod watch sees the exit
    sim.kube.delete_pod(sim.namespace, sim.pod_names["worker-0"])
    sim.condition("Failed", reason="PyTorchJobFailed", message=f"PyTorchJob {sim.name} is failed.")


def _check_deleted_pods_code(result: JobResult, out: str, kube: FakeKube) -> None:
    assert (result.failed_replica, result.exit_code) == ("worker-0", 3), result.describe()
    assert result.log_tail[-1] == "RuntimeError: CUDA out of memory"


def s_replica_failure(sim: JobSim) -> None:
    running(sim)
    sim.log("worker-0", "step 1", "Traceback (most recent call last):", "RuntimeError: CUDA out of memory")
    sim.sleep(0.1)
    sim.exit("worker-0", 3)
    sim.kube.add_event(sim.namespace, "Pod", sim.pod_names["worker-0"], "OOMish", "container pytorch exited with 3")
    # The pod of the same name of an earlier job of the same name (a retried task): not this job's event.
    sim.kube.add_event(
        sim.namespace, "Pod", sim.pod_names["worker-0"], "OOMish", "an earlier pod exited with 9", uid="earlier-pod"
    )
    sim.condition(
        "Failed",
        reason="PyTorchJobFailed",
        message=f"PyTorchJob {sim.name} is failed because 1 Worker replica(s) failed.",
    )


def s_restarting(sim: JobSim) -> None:
    running(sim)
    sim.log("worker-0", "attempt 1")
    sim.sleep(0.2)
    sim.restart_in_place("worker-0", 137)
    sim.condition("Restarting", message="worker-0 restarted after exit code 137")
    sim.log("worker-0", "attempt 2")
    sim.sleep(0.2)
    sim.condition("Running")
    succeed(sim)


def s_suspended_then_resumed(sim: JobSim) -> None:
    sim.condition("Created")
    sim.condition("Suspended", message="job suspended by the queue")
    sim.sleep(0.6)
    sim.condition("Suspended", status="False")
    running(sim)
    succeed(sim)


def s_deleted_externally(sim: JobSim) -> None:
    running(sim)
    sim.log("master-0", "training")
    sim.sleep(0.3)
    sim.delete_job()


def unschedulable_worker_0(sim: JobSim) -> None:
    """Every pod is placed but worker-0, which the scheduler reports unschedulable; the step sees the scheduler's
    verdicts with the pods."""
    with sim.at_once():
        sim.create_pods(scheduled=False)
        sim.condition("Created")
        sim.schedule(*(label for label in sim.labels() if label != "worker-0"))
        sim.unschedulable("worker-0")


def s_unschedulable(sim: JobSim) -> None:
    unschedulable_worker_0(sim)
    sim.wait_deleted()


def s_config_error(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.waiting("worker-0", "CreateContainerConfigError", 'secret "wandb" not found')
    sim.wait_deleted()


def s_scale_up_declined(sim: JobSim) -> None:
    """A scale-up was triggered, then the autoscaler gave up on the pod: it is unschedulable again (both events are
    there by the time the step reads them)."""
    with sim.at_once():
        unschedulable_worker_0(sim)
        sim.autoscaler("worker-0", triggered=True)
        sim.autoscaler("worker-0", triggered=False)
    sim.wait_deleted()


def s_unschedulable_after_an_earlier_pods_scale_up(sim: JobSim) -> None:
    """The autoscaler added a node for the pod of the same name of an earlier job of the same name (a retried
    task): that is not this pod's scale-up, which is unschedulable with none."""
    with sim.at_once():
        unschedulable_worker_0(sim)
        sim.autoscaler("worker-0", triggered=True, uid="uid-of-an-earlier-pod")
    sim.wait_deleted()


def s_no_scheduler(sim: JobSim) -> None:
    """The pods name a scheduler that is not running: nothing ever places them, nothing reports why."""
    sim.create_pods(scheduled=False)
    sim.condition("Created")
    sim.wait_deleted()


def s_watch_expiry(sim: JobSim) -> None:
    running(sim)
    sim.sleep(0.2)
    sim.kube.restart_with_compacted_history()
    sim.sleep(0.2)
    sim.kube.restart_with_compacted_history()  # twice: the backend must recover every time, not only once
    sim.sleep(0.2)
    succeed(sim)


@dataclass
class Case:
    id: str
    scenario: Callable[[JobSim], None]
    phase: JobPhase
    reason: str | tuple[str, ...]  # a tuple: any of these (the order of two pod changes is the watch's)
    options: dict[str, Any] = field(default_factory=dict)
    # (run id, task id) the job is stamped with before it is submitted; None: a job outside a pipeline.
    ids: tuple[str, str] | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    timeout: float | None = 20.0
    deleted_by_backend: bool = False
    output_has: tuple[str, ...] = ()
    check: Callable[[JobResult, str, FakeKube], None] | None = None
    # The case's timeout (pending, suspended, overall) passes on the virtual clock, tick by tick, from when this holds
    # of what the backend printed and of the cluster; None: no time passes.
    elapse_from: Callable[[str, FakeKube], bool] | None = None


TICK_S = 0.1  # a tenth of the shortest timeout here: each is acted on within a tick of passing


def _check_failure(result: JobResult, out: str, kube: FakeKube) -> None:
    assert result.failed_replica == "worker-0"
    assert result.exit_code == 3
    assert result.log_tail[-1] == "RuntimeError: CUDA out of memory"
    assert "1 Worker replica(s) failed" in result.message
    assert "recent events" in result.message and "container pytorch exited with 3" in result.message
    assert "an earlier pod" not in result.message
    assert "RuntimeError: CUDA out of memory" in result.describe()


def _check_pending(result: JobResult, out: str, kube: FakeKube) -> None:
    assert result.reason in result.message
    assert result.failed_replica == "worker-0"


def _check_no_scheduler(result: JobResult) -> None:
    assert "no scheduler has placed it yet (schedulerName default-scheduler)" in result.message
    assert result.failed_replica in ("master-0", "worker-0", "worker-1")


def _check_relisted(result: JobResult, out: str, kube: FakeKube) -> None:
    lists = [p for m, p in kube.requests if m == "GET" and "/pytorchjobs?" in p and "watch=" not in p]
    assert len(lists) >= 2, lists  # one after each 410 (the job created here is watched from its create)


def _check_faults(result: JobResult, out: str, kube: FakeKube) -> None:
    assert all(f.fired for f in kube.faults), [(f.action, f.path, f.seen) for f in kube.faults]


CASES = [
    Case(
        "success",
        s_success,
        JobPhase.SUCCEEDED,
        "PyTorchJobSucceeded",
        output_has=("[master-0] hello from master-0", "[worker-1] epoch 1 loss 0.5", ": Running: PyTorchJob"),
        ids=("run-1", "task-1"),
    ),
    Case("replica failure", s_replica_failure, JobPhase.FAILED, "PyTorchJobFailed", check=_check_failure),
    Case(
        "failed pod deleted by the operator",
        s_failed_pod_deleted,
        JobPhase.FAILED,
        "PyTorchJobFailed",
        check=_check_deleted_pods_code,
    ),
    Case(
        "restarting then success",
        s_restarting,
        JobPhase.SUCCEEDED,
        "PyTorchJobSucceeded",
        output_has=("[worker-0] attempt 1", "[worker-0] attempt 2", "Restarting"),
    ),
    Case(
        "suspended then resumed",
        s_suspended_then_resumed,
        JobPhase.SUCCEEDED,
        "PyTorchJobSucceeded",
        output_has=("Suspended: job suspended by the queue",),
    ),
    Case(
        "suspended too long",
        s_suspended_forever,
        JobPhase.FAILED,
        "Suspended",
        options={"suspended_timeout_s": 0.5},
        deleted_by_backend=True,
        elapse_from=lambda out, kube: "waiting: suspended" in out,
    ),
    Case("deleted externally", s_deleted_externally, JobPhase.FAILED, "Deleted"),
    Case(
        "image pull backoff",
        s_image_pull,
        JobPhase.FAILED,
        # The kubelet says ErrImagePull, then ImagePullBackOff: the backend fails on whichever it sees first.
        ("ErrImagePull", "ImagePullBackOff"),
        deleted_by_backend=True,
        check=_check_pending,
    ),
    *(
        Case(
            case_id,
            scenario,
            JobPhase.FAILED,
            "Unschedulable",
            deleted_by_backend=True,
            check=_check_pending,
            elapse_from=lambda out, kube: "worker-0: Unschedulable" in out,
        )
        for case_id, scenario in (
            ("unschedulable", s_unschedulable),
            ("unschedulable, an earlier pod's scale-up", s_unschedulable_after_an_earlier_pods_scale_up),
            ("scale-up declined", s_scale_up_declined),
        )
    ),
    Case(
        "container config error",
        s_config_error,
        JobPhase.FAILED,
        "CreateContainerConfigError",
        timeout=None,  # fails at once, whatever the timeouts
        options={"pending_timeout_s": None},
        deleted_by_backend=True,
        check=_check_pending,
    ),
    Case(
        "no scheduler",
        s_no_scheduler,
        JobPhase.FAILED,
        "NotScheduled",
        deleted_by_backend=True,
        check=lambda result, out, kube: _check_no_scheduler(result),
        # The step says nothing of pods no scheduler has looked at yet: the time runs once they exist.
        elapse_from=lambda out, kube: bool(kube.jobs_of("pytorchjobs")) and bool(kube.pods),
    ),
    Case(
        "watch expiry 410",
        s_watch_expiry,
        JobPhase.SUCCEEDED,
        "PyTorchJobSucceeded",
        output_has=("410 Gone",),
        check=_check_relisted,
    ),
    Case(
        "api faults retried",
        s_success,
        JobPhase.SUCCEEDED,
        "PyTorchJobSucceeded",
        faults=[
            {"action": "500", "path": r"/pytorchjobs$", "method": "POST"},
            {"action": "reset", "path": r"/pytorchjobs$", "method": "POST", "nth": 2},
            {"action": "429", "path": r"/pytorchjobs$", "method": "GET", "times": 2},
            # The pods' watch (from the job's create: no list first): a 500, a re-list, a dropped watch, a re-list.
            {"action": "500", "path": r"/pods$", "method": "GET", "nth": 1},
            {"action": "reset", "path": r"/pods$", "method": "GET", "nth": 3},
            {"action": "503", "path": r"/log$", "method": "GET"},
        ],
        check=_check_faults,
    ),
    Case(
        "overall timeout",
        s_forever,
        JobPhase.FAILED,
        "Timeout",
        timeout=1.0,
        deleted_by_backend=True,
        output_has=("[master-0] step 1",),
        elapse_from=lambda out, kube: "[master-0] step 1" in out,
    ),
]


def gone(kube: FakeKube) -> bool:
    """Whether the job is gone (the backend deletes a job it gives up on)."""
    return not kube.jobs_of("pytorchjobs")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scenario(case: Case, kube: FakeKube, operator: OperatorSim, virtual_clock: VirtualClock) -> None:
    operator.scenario = case.scenario
    for fault in case.faults:
        kube.fault(**fault)
    backend, out = make_backend(kube, **case.options)
    job = pytorch_job(workers=2)
    if case.ids is not None:
        stamp_run_identity(job, *case.ids)
    elapse_from = case.elapse_from
    time_runs = (
        virtual_clock.ticking(lambda: elapse_from(out.getvalue(), kube), lambda: gone(kube), TICK_S)
        if elapse_from is not None
        else contextlib.nullcontext()
    )
    with time_runs:
        result = backend.run(job, timeout=case.timeout)
    text = out.getvalue()
    reasons = case.reason if isinstance(case.reason, tuple) else (case.reason,)
    assert result.phase == case.phase and result.reason in reasons, (result.describe(), text)
    for expected in case.output_has:
        assert expected in text, text
    if case.deleted_by_backend:
        assert kube.jobs_of("pytorchjobs") == []
        assert [d[3] for d in kube.deletions] == ["Background"]
    if case.check is not None:
        case.check(result, text, kube)


def test_a_crash_loop_ended_by_the_steps_timeout_names_the_replica_and_its_exit_code(
    kube: FakeKube, operator: OperatorSim, virtual_clock: VirtualClock
) -> None:
    looped = threading.Event()

    def crash_loop(sim: JobSim) -> None:
        running(sim)
        for _ in range(3):  # kubelet restarts the container in place, again and again
            sim.log("worker-1", "RuntimeError: CUDA out of memory")
            sim.restart_in_place("worker-1", 137)
            sim.sleep(0.1)
        looped.set()
        sim.wait_deleted()  # no backoffLimit: only the step's timeout ends it

    operator.scenario = crash_loop
    backend, out = make_backend(kube)
    with virtual_clock.ticking(looped.is_set, lambda: gone(kube), TICK_S):  # the timeout runs after 3 restarts
        result = backend.run(pytorch_job(workers=2), timeout=1.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout"), out.getvalue()
    assert (result.failed_replica, result.exit_code) == ("worker-1", 137)
    assert "BackOff" in result.message

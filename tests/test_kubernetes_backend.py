"""The Kubernetes backend against a fake API server driven by the real ``kubernetes`` client.

Each scenario is played by a simulated operator (tests/fake_k8s) that creates pods with the
operators' labels and moves the job through its conditions; the backend only sees HTTP.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client

from kftrain.backends.base import JobHandle, JobPhase, JobResult, load_identity
from kftrain.backends.kubernetes import KubernetesConfig
from kftrain.backends.kubernetes.api import is_transient
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.pod_state import replica_label
from kftrain.errors import KftrainError
from kftrain.job import PodSettings, ReplicaInput, apply_pod_settings, build_job, render_manifest
from kftrain.job.kinds.mpijob import MPIImplementation, to_v1, to_v2beta1
from kftrain.job.model import TrainingJob
from kftrain.job.naming import RUN_ID_LABEL, TASK_ID_LABEL, job_name_for, label_value, stamp_run_identity
from kftrain.retry import RetryPolicy, call_with_retry
from tests.fake_k8s import FakeKube, Fault, JobSim, OperatorSim, kueue_webhook
from tests.fake_k8s.server import load_crd_schemas

REPO_ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = REPO_ROOT.parent / "shared/reference/crds"
RBAC_DIR = REPO_ROOT / "deploy/rbac"

FAST_RETRY = RetryPolicy(attempts=6, initial_s=0.02, max_s=0.1)


def _fast_config(**overrides: Any) -> KubernetesConfig:
    """Short intervals everywhere so the whole suite stays well under a minute."""
    values: dict[str, Any] = dict(
        namespace="default",
        poll_interval_s=0.05,
        watch_window_s=1,
        log_drain_s=1.0,
        pending_timeout_s=0.5,
        retry=FAST_RETRY,
        owner_pod_name="",
        owner_pod_uid="",
    )
    values.update(overrides)
    return KubernetesConfig(**values)


def api_client(kube: FakeKube) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = kube.url
    return client.ApiClient(cfg)


def make_backend(kube: FakeKube, **overrides: Any) -> tuple[KubernetesBackend, io.StringIO]:
    out = io.StringIO()
    return KubernetesBackend(_fast_config(out=out, **overrides), api_client(kube)), out


def stamped(job: TrainingJob, run_id: str, task_id: str) -> TrainingJob:
    """``job`` named and labelled from its run and task, as the launch step submits it."""
    stamp_run_identity(job, run_id, task_id)
    return job


def pytorch_job(workers: int = 1, name: str = "digits") -> TrainingJob:
    return build_job(
        "PyTorchJob",
        name,
        {
            "Master": ReplicaInput(1, command=["python", "train.py"]),
            "Worker": ReplicaInput(workers, command=["python", "train.py"]),
        },
        image="example.com/train:1",
    )


def mpi_job(api_version: str = "kubeflow.org/v2beta1") -> TrainingJob:
    return build_job(
        "MPIJob",
        "allreduce",
        {
            "Launcher": ReplicaInput(1, command=["mpirun", "python", "train.py"]),
            "Worker": ReplicaInput(2),
        },
        image="example.com/mpi:1",
        api_version=api_version,
    )


# -- scenarios (played by the simulated operator) --------------------------------------------------


def running(sim: JobSim, pending_s: float = 0.15) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.sleep(pending_s)  # the log followers see Pending pods first and must wait for them
    sim.start()
    sim.condition("Running")


def succeed(sim: JobSim) -> None:
    for label in sim.labels():
        sim.log(label, f"hello from {label}", "epoch 1 loss 0.5")
    sim.sleep(0.1)
    sim.exit_all(0)
    sim.condition("Succeeded", message=f"{sim.obj['kind']} {sim.name} successfully completed.")


def s_success(sim: JobSim) -> None:
    running(sim)
    succeed(sim)


def s_replica_failure(sim: JobSim) -> None:
    running(sim)
    sim.log("worker-0", "step 1", "Traceback (most recent call last):", "RuntimeError: CUDA out of memory")
    sim.sleep(0.1)
    sim.exit("worker-0", 3)
    sim.kube.add_event(sim.namespace, "Pod", sim.pod_names["worker-0"], "OOMish", "container pytorch exited with 3")
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


def s_suspended_forever(sim: JobSim) -> None:
    sim.condition("Created")
    sim.condition("Suspended")
    sim.wait_deleted()


def s_deleted_externally(sim: JobSim) -> None:
    running(sim)
    sim.log("master-0", "training")
    sim.sleep(0.3)
    sim.delete_job()


def s_image_pull(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.image_pull_backoff("worker-0")
    sim.wait_deleted()


def unschedulable_worker_0(sim: JobSim) -> None:
    """Every pod is placed but worker-0, which the scheduler reports unschedulable."""
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
    """A scale-up was triggered, then the autoscaler gave up on the pod: it is unschedulable again."""
    unschedulable_worker_0(sim)
    sim.autoscaler("worker-0", triggered=True)
    sim.autoscaler("worker-0", triggered=False)
    sim.wait_deleted()


def s_no_scheduler(sim: JobSim) -> None:
    """The pods name a scheduler that is not running: nothing ever places them, nothing reports why."""
    sim.create_pods(scheduled=False)
    sim.condition("Created")
    sim.wait_deleted()


def s_watch_expiry(sim: JobSim) -> None:
    running(sim)
    sim.sleep(0.2)
    sim.kube.expire_watches()
    sim.sleep(0.2)
    sim.kube.expire_watches()  # twice: the backend must recover every time, not only once
    sim.sleep(0.2)
    succeed(sim)


def s_forever(sim: JobSim) -> None:
    running(sim, pending_s=0.0)
    n = 0
    while True:
        n += 1
        sim.log("master-0", f"step {n}")
        sim.sleep(0.05)


# -- table ------------------------------------------------------------------------------------------


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


def _check_failure(result: JobResult, out: str, kube: FakeKube) -> None:
    assert result.failed_replica == "worker-0"
    assert result.exit_code == 3
    assert result.log_tail[-1] == "RuntimeError: CUDA out of memory"
    assert "1 Worker replica(s) failed" in result.message
    assert "recent events" in result.message and "container pytorch exited with 3" in result.message
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
    Case(
        "unschedulable",
        s_unschedulable,
        JobPhase.FAILED,
        "Unschedulable",
        deleted_by_backend=True,
        check=_check_pending,
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
        "scale-up declined",
        s_scale_up_declined,
        JobPhase.FAILED,
        "Unschedulable",
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
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scenario(case: Case, kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = case.scenario
    for fault in case.faults:
        kube.fault(**fault)
    backend, out = make_backend(kube, **case.options)
    job = pytorch_job(workers=2)
    if case.ids is not None:
        stamp_run_identity(job, *case.ids)
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


# -- waiting: queues, gangs, what the log says, and every replica's log ----------------------------------


def until_said(sim: JobSim, out: io.StringIO, text: str, timeout: float = 20.0) -> None:
    """Wait (as the simulated cluster) until the backend's output shows ``text``: it has seen what it reports."""
    end = time.monotonic() + timeout
    while text not in out.getvalue():
        assert time.monotonic() < end, f"the backend did not say {text!r} within {timeout}s:\n{out.getvalue()}"
        sim.sleep(0.02)


def test_a_job_held_by_kueue_is_waited_on_until_admitted(kube: FakeKube, operator: OperatorSim) -> None:
    kube.admission.append(kueue_webhook)
    backend, out = make_backend(kube, pending_timeout_s=0.5)
    waiting = "digits: waiting: suspended until Kueue admits it from LocalQueue 'team-a' (no pods until then)"

    def scenario(sim: JobSim) -> None:
        sim.condition("Created")
        assert sim.suspended  # Kueue's webhook suspended it at creation
        sim.report_suspended()
        until_said(sim, out, waiting)
        sim.report_suspended()  # the operator's status updates change nothing the backend reports
        sim.sleep(0.6)  # queued longer than pending_timeout_s: a queue is no pending pod
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


def test_a_job_suspended_past_the_timeout_says_what_it_waited_for(kube: FakeKube, operator: OperatorSim) -> None:
    kube.admission.append(kueue_webhook)
    operator.scenario = s_suspended_forever
    backend, _ = make_backend(kube)
    result = backend.run(apply_pod_settings(pytorch_job(), PodSettings(queue_name="team-a")), timeout=0.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout")
    assert "suspended until Kueue admits it from LocalQueue 'team-a'" in result.message
    assert kube.jobs_of("pytorchjobs") == []


def test_a_volcano_gang_still_gathering_is_waited_on(kube: FakeKube, operator: OperatorSim) -> None:
    """Volcano's words on a gang's members while it cannot place them all: waited on, and said once."""
    backend, out = make_backend(kube, pending_timeout_s=0.5)

    def scenario(sim: JobSim) -> None:
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
        sim.sleep(0.8)  # longer than pending_timeout_s
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
    assert result.failed_replica == "worker-0" and kube.jobs_of("pytorchjobs") == []


def s_ends_at_once_with_a_restart(sim: JobSim) -> None:
    """Every replica logs and the job succeeds at once; worker-0's container had restarted in place before
    its pod was first seen running (one status update shows it running its second run)."""
    sim.create_pods()
    sim.condition("Created")
    sim.start("master-0", "worker-1")
    sim.log("worker-0", "worker-0 run 1 line 1", "worker-0 run 1 line 2")
    sim.restart_in_place("worker-0", 137)
    for label in sim.labels():
        sim.log(label, f"{label} line 1", f"{label} line 2")
    sim.exit_all(0)
    sim.condition("Succeeded")


def _replica_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("[kftrain]")]


def test_every_replicas_log_once_when_the_job_ends_at_once(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_ends_at_once_with_a_restart
    backend, out = make_backend(kube)
    assert backend.run(pytorch_job(workers=2), timeout=20).succeeded
    expected = {f"[{label}] {label} line {i}" for label in ("master-0", "worker-0", "worker-1") for i in (1, 2)}
    expected |= {"[worker-0] worker-0 run 1 line 1", "[worker-0] worker-0 run 1 line 2"}
    assert sorted(_replica_lines(out.getvalue())) == sorted(expected)  # each line, once


def test_every_replicas_log_when_the_job_ended_before_its_pods_were_seen(kube: FakeKube, operator: OperatorSim) -> None:
    """The pod watch has shown no pod when the job is seen ended (its first request is held): the end lists
    them and prints each replica's log whole, and the run before a restart in place by its last lines
    (``previous``)."""
    operator.scenario = s_ends_at_once_with_a_restart
    backend, out = make_backend(kube)
    handle = backend.submit(pytorch_job(workers=2))
    operator.join()  # the job has ended before the wait begins
    hold = kube.fault("hold", path=r"/pods$", method="GET", query="watch=")  # the pod watch's first request
    try:
        result = backend.wait(handle, timeout=20)
    finally:
        hold.released.set()
    assert result.succeeded, (result.describe(), out.getvalue())
    assert hold.fired == 1
    text = out.getvalue()
    expected = {f"[{label}] {label} line {i}" for label in ("master-0", "worker-0", "worker-1") for i in (1, 2)}
    expected |= {"[worker-0] worker-0 run 1 line 1", "[worker-0] worker-0 run 1 line 2"}
    assert sorted(_replica_lines(text)) == sorted(expected)
    assert (
        "[kftrain] worker-0 restarted in place (1 restart(s)); the last 2 log lines of its previous run, which "
        "ended with exit code 137:\n[worker-0] worker-0 run 1 line 1\n[worker-0] worker-0 run 1 line 2\n"
    ) in text
    assert text.index("line 2") < text.index("digits succeeded in")  # the logs come before the verdict


# -- lifecycle around the wait ----------------------------------------------------------------------


def test_identity_written_before_waiting(
    kube: FakeKube, operator: OperatorSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator.scenario = s_success
    seen: list[JobHandle] = []
    identity = tmp_path / "out" / "job.json"
    backend, _ = make_backend(kube, identity_path=identity)
    wait = backend.wait

    def wait_after_checking(handle: JobHandle, timeout: float | None = None) -> JobResult:
        assert load_identity(identity) == handle  # written first, then the wait
        assert not kube.deletions and kube.jobs_of("pytorchjobs")  # and the job exists
        seen.append(handle)
        return wait(handle, timeout)

    monkeypatch.setattr(backend, "wait", wait_after_checking)
    job = stamped(pytorch_job(), "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "task-7")
    assert backend.run(job, timeout=20).succeeded
    (handle,) = seen
    assert handle.backend == "kubernetes" and handle.namespace == "default" and handle.kind == "PyTorchJob"
    assert handle.uid == kube.jobs_of("pytorchjobs")[0]["metadata"]["uid"]
    assert json.loads(identity.read_text())["name"] == handle.name == job.name


def test_name_and_labels_from_run_and_task(kube: FakeKube) -> None:
    run_id, task_id = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "9a8b7c6d-0000-1111-2222-333344445555"
    backend, _ = make_backend(kube)
    handle = backend.submit(stamped(pytorch_job(), run_id, task_id))
    assert handle.name == job_name_for(run_id, task_id, base="digits")
    obj = kube.jobs_of("pytorchjobs")[0]
    assert obj["metadata"]["labels"][RUN_ID_LABEL] == run_id
    assert obj["metadata"]["labels"][TASK_ID_LABEL] == task_id
    pod_labels = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert pod_labels[RUN_ID_LABEL] == run_id


def test_launcher_restarted_reattaches(kube: FakeKube, operator: OperatorSim) -> None:
    def slow_success(sim: JobSim) -> None:
        sim.sleep(0.5)
        s_success(sim)

    operator.scenario = slow_success
    first, _ = make_backend(kube, owner_pod_name="launcher-a", owner_pod_uid="uid-a")
    h1 = first.submit(stamped(pytorch_job(), "run-42", "train"))  # ... and the launcher pod dies before waiting
    second, out = make_backend(kube, owner_pod_name="launcher-b", owner_pod_uid="uid-b")
    h2 = second.submit(stamped(pytorch_job(), "run-42", "train"))
    assert h2 == h1
    result = second.wait(h2, timeout=20)
    assert result.succeeded, result.describe()
    assert "reattached" in out.getvalue()
    assert len(kube.jobs_of("pytorchjobs")) == 1 and len(kube.created) == 1
    owners = kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == ["uid-a", "uid-b"]  # the new launcher keeps the job alive too


def test_existing_job_of_another_task_is_not_adopted(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    job = backend.prepare(stamped(pytorch_job(), "run-42", "train"))
    manifest = render_manifest(job)
    manifest["metadata"]["labels"][TASK_ID_LABEL] = "some-other-task"
    client.CustomObjectsApi(api_client(kube)).create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", manifest
    )
    with pytest.raises(KftrainError, match="not created by this task"):
        backend.submit(stamped(pytorch_job(), "run-42", "train"))
    assert len(kube.created) == 1


def test_owner_reference_from_kfp_env(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_POD_NAME", "pipeline-step-abc")
    monkeypatch.setenv("KFP_POD_UID", "0b9c-uid")
    backend, _ = make_backend(kube, owner_pod_name=None, owner_pod_uid=None)
    backend.submit(pytorch_job())
    (owner,) = kube.jobs_of("pytorchjobs")[0]["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "pipeline-step-abc",
        "uid": "0b9c-uid",
        "controller": False,
        "blockOwnerDeletion": False,
    }


def test_no_owner_reference_outside_kfp(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    monkeypatch.delenv("KFP_POD_UID", raising=False)
    backend, _ = make_backend(kube, owner_pod_name=None, owner_pod_uid=None)
    backend.submit(pytorch_job())
    assert "ownerReferences" not in kube.jobs_of("pytorchjobs")[0]["metadata"]


def test_namespace_from_service_account(kube: FakeKube, tmp_path: Path) -> None:
    ns_file = tmp_path / "namespace"
    ns_file.write_text("team-a\n")
    backend, _ = make_backend(kube, namespace=None, namespace_file=ns_file)
    handle = backend.submit(pytorch_job())
    assert handle.namespace == "team-a"
    assert kube.jobs_of("pytorchjobs")[0]["metadata"]["namespace"] == "team-a"
    fallback, _ = make_backend(kube, namespace=None, namespace_file=tmp_path / "absent")
    assert fallback.resolve_namespace() == "default"


def test_invalid_job_rejected_by_crd_schema(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    job = pytorch_job()
    job.replica_specs["Worker"].template.spec.extra["hostNetwork"] = "yes"  # schema: boolean
    with pytest.raises(KftrainError, match="HTTP 422"):
        backend.submit(job)
    assert kube.jobs_of("pytorchjobs") == []


def test_cancel_is_idempotent(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    handle = backend.submit(pytorch_job())
    backend.cancel(handle)
    backend.cancel(handle)
    other, _ = make_backend(kube)
    other.cancel(handle)  # already gone: 404 is fine
    assert kube.jobs_of("pytorchjobs") == []


def _job_lists(kube: FakeKube) -> list[str]:
    return [p for m, p in kube.requests if m == "GET" and "/pytorchjobs?" in p and "watch=" not in p]


def _break_watches(kube: FakeKube, times: int) -> None:
    """Reset the connection of the next ``times`` watch requests (the client's own pool retries some of them)."""
    kube.faults.append(Fault(action="reset", path=r"/pytorchjobs$", method="GET", query="watch=", times=times))


def test_broken_watch_streams_are_retried_from_a_fresh_list(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_success
    _break_watches(kube, times=8)  # more than one try of the watch: the client retries a reset 3 times itself
    backend, out = make_backend(kube)
    result = backend.run(pytorch_job(), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())
    assert "[master-0] hello from master-0" in out.getvalue()
    assert len(_job_lists(kube)) >= 2  # one before each try after a broken stream (none before the first)


def test_watch_broken_every_time_gives_up_after_the_retry_policy(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_forever
    _break_watches(kube, times=1000)
    backend, _ = make_backend(kube)
    with pytest.raises(urllib3.exceptions.HTTPError):
        backend.run(pytorch_job(), timeout=20)
    # One list before each of the retries (the job created here is watched from its create: no first list).
    assert len(_job_lists(kube)) == FAST_RETRY.attempts - 1
    assert kube.jobs_of("pytorchjobs") == []  # Backend.run cancels the job it cannot follow


def s_long(sim: JobSim) -> None:
    running(sim, pending_s=0.3)
    for step in range(15):
        for label in sim.labels():
            sim.log(label, f"step {step}")
        sim.sleep(0.1)
    succeed(sim)


def test_waiting_makes_no_periodic_request(kube: FakeKube, operator: OperatorSim) -> None:
    """Over 2 s of a job, Pending pods first, what the launcher asks of the API server does not grow with the
    wait: one watch each of the job and of its pods, from the version the create returned (no list first),
    one log stream per replica, no read of a single pod, and one list of the pods once the job has ended (for
    the runs no stream printed). The watches' windows (a whole minute here) are never cut short."""
    operator.scenario = s_long
    # poll_interval_s: the autoscaler's events are read only for a pod no node took for that long.
    backend, out = make_backend(kube, poll_interval_s=1.0, watch_window_s=60)
    result = backend.run(pytorch_job(workers=2), timeout=30)
    assert result.succeeded, (result.describe(), out.getvalue())
    assert "[worker-1] step 14" in out.getvalue()
    with kube.cond:
        requests = dict(kube.stats.requests)
        peak = dict(kube.stats.peak)
    assert requests == {"create": 1, "watch": 2, "log-follow": 3, "list": 1}, kube.requests
    assert peak == {"watch": 2, "log-follow": 3}


# The CLI (`kftrain launch -f JOB --backend kubernetes`) on a training-operator kind and on a TrainJob, both
# streaming a replica's log when SIGTERM comes.
CLI_JOBS = {
    "PyTorchJob": (
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "term"},
            "spec": {
                "pytorchReplicaSpecs": {
                    rtype: {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "pytorch", "image": "example.com/t:1"}]}},
                    }
                    for rtype in ("Master", "Worker")
                }
            },
        },
        "master-0",
    ),
    "TrainJob": (
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "term"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "command": ["x"]}},
        },
        "node-0",
    ),
}


@pytest.mark.parametrize("kind", list(CLI_JOBS))
def test_sigterm_deletes_the_job(kind: str, kube: FakeKube, operator: OperatorSim, tmp_path: Path) -> None:
    manifest, streaming = CLI_JOBS[kind]

    def forever(sim: JobSim) -> None:
        sim.create_pods()
        sim.start()
        n = 0
        while True:
            n += 1
            sim.log(streaming, f"step {n}")
            sim.sleep(0.05)

    operator.scenario = forever
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(manifest))
    identity = tmp_path / "job.json"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
        "PYTHONPATH": str(REPO_ROOT),
    }
    for name in ("KFP_POD_NAME", "KFP_POD_UID", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(job_file), "--backend", "kubernetes"]
    proc = subprocess.Popen(
        [*cli, "--identity-file", str(identity)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    plural = manifest["kind"].lower() + "s"
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        end = time.monotonic() + 20
        while not any(line.startswith(f"[{streaming}] step") for line in list(lines)):  # inside the wait
            assert proc.poll() is None and time.monotonic() < end, "".join(lines)
            time.sleep(0.05)
        assert identity.exists() and kube.jobs_of(plural)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        while kube.jobs_of(plural):
            assert time.monotonic() - sent < 10, "job not deleted within 10 s of SIGTERM"
            time.sleep(0.05)
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    output = "".join(lines)
    assert rc == 143, output
    assert "terminated" in output, output
    assert [d[2] for d in kube.deletions] == [load_identity(identity).name]


# -- MPIJob versions ---------------------------------------------------------------------------------


def test_mpijob_v2beta1_served(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_success
    backend, out = make_backend(kube)
    result = backend.run(mpi_job("kubeflow.org/v1"), timeout=20)  # built for v1, cluster serves v2beta1
    assert result.succeeded, result.describe()
    (created,) = kube.created
    assert created["apiVersion"] == "kubeflow.org/v2beta1"
    assert "mainContainer" not in created["spec"]
    text = out.getvalue()
    assert "[launcher-0] hello from launcher-0" in text and "[worker-1] hello from worker-1" in text


def test_mpijob_only_v1_served(kube: FakeKube, operator: OperatorSim) -> None:
    kube.served["mpijobs"] = ["v1"]
    operator.scenario = s_success
    backend, out = make_backend(kube)
    job = mpi_job()
    job.spec.ssh_auth_mount_path = "/home/mpiuser/.ssh"
    job.spec.mpi_implementation = MPIImplementation.OPENMPI
    result = backend.run(job, timeout=20)
    assert result.succeeded, result.describe()
    (created,) = kube.created
    assert created["apiVersion"] == "kubeflow.org/v1"
    for key in ("sshAuthMountPath", "launcherCreationPolicy", "runLauncherAsWorker", "mpiImplementation"):
        assert key not in created["spec"]
    for rspec in created["spec"]["mpiReplicaSpecs"].values():
        assert rspec["template"]["spec"]["containers"][0]["name"] == "mpi"
    assert "serves MPIJob kubeflow.org/v1" in out.getvalue()
    assert "[launcher-0] hello" in out.getvalue()


def test_no_mpijob_served(kube: FakeKube) -> None:
    kube.served["mpijobs"] = []
    backend, _ = make_backend(kube)
    with pytest.raises(KftrainError, match="no MPIJob CRD is served"):
        backend.submit(mpi_job())


def test_mpijob_conversion_round_trip() -> None:
    schemas = load_crd_schemas(CRD_DIR) if CRD_DIR.is_dir() else None
    v2 = mpi_job()
    v1 = to_v1(v2)
    assert v1.api_version == "kubeflow.org/v1"
    assert all(r.template.spec.containers[0].name == "mpi" for r in v1.replica_specs.values())
    back = to_v2beta1(v1)
    assert render_manifest(back) == render_manifest(v2) | {"spec": render_manifest(back)["spec"]}
    assert back.api_version == "kubeflow.org/v2beta1"
    assert back.spec.main_container is None
    if schemas is not None:
        assert schemas.errors(render_manifest(v1)) == []
        assert schemas.errors(render_manifest(back)) == []
    v2.spec.run_launcher_as_worker = True
    with pytest.raises(KftrainError, match="runLauncherAsWorker"):
        to_v1(v2)


# -- pod settings ------------------------------------------------------------------------------------


def test_pod_settings_in_created_job(kube: FakeKube) -> None:
    settings = PodSettings(
        gpus=2,
        cpu="4",
        memory="16Gi",
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="trainer",
        image_pull_secrets=["regcred"],
        secret_env={"WANDB_API_KEY": "wandb/api-key"},
    )
    job = apply_pod_settings(pytorch_job(), settings)
    backend, _ = make_backend(kube)
    backend.submit(job)
    (created,) = kube.created
    for rtype in ("Master", "Worker"):
        pod = created["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
        assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert pod["serviceAccountName"] == "trainer"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        (container,) = pod["containers"]
        assert container["resources"] == {  # requests = limits for cpu and memory (Guaranteed); GPUs a limit
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 2},
        }
        secret_env = [e for e in container["env"] if e["name"] == "WANDB_API_KEY"]
        assert secret_env == [
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
        ]


def test_mpi_launcher_gets_no_gpu() -> None:
    job = apply_pod_settings(mpi_job(), PodSettings(gpus=1))
    launcher = job.replica_specs["Launcher"].template.spec.containers[0]
    worker = job.replica_specs["Worker"].template.spec.containers[0]
    assert launcher.resources is None
    assert worker.resources == {"limits": {"nvidia.com/gpu": 1}}


# -- helpers -----------------------------------------------------------------------------------------


def test_job_name_for_is_deterministic_and_valid() -> None:
    run_id, task_id = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345", "9a8b7c6d-0000-1111-2222-333344445555"
    name = job_name_for(run_id, task_id, base="My_Very.Long Pipeline Step Name " * 3)
    assert name == job_name_for(run_id, task_id, base="My_Very.Long Pipeline Step Name " * 3)
    assert name != job_name_for(run_id, "other-task", base="My_Very.Long Pipeline Step Name " * 3)
    assert len(name) <= 63 and name[0].isalpha()
    import re

    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), name
    assert job_name_for("1234", "t").startswith("kft-")
    assert len(job_name_for(run_id, task_id, max_length=63)) <= 63
    assert label_value("_abc/def_") == "abc-def"


def test_replica_labels() -> None:
    to = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1"}
    mo = {"training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "3"}
    assert replica_label(to) == "worker-1"
    assert replica_label(mo) == "worker-3"
    assert replica_label({"training.kubeflow.org/job-role": "launcher"}) == "launcher-0"


def test_retry_helper_bounds() -> None:
    from kubernetes.client.exceptions import ApiException

    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ApiException(status=503, reason="Service Unavailable")
        return "ok"

    policy = RetryPolicy(attempts=5, initial_s=0.1, max_s=0.15)
    assert call_with_retry(flaky, policy=policy, is_transient=is_transient, what="flaky", sleep=sleeps.append) == "ok"
    assert sleeps == [0.1, 0.15]

    def forbidden() -> None:
        calls.append(1)
        raise ApiException(status=403, reason="Forbidden")

    calls.clear()
    with pytest.raises(ApiException):
        call_with_retry(forbidden, policy=policy, is_transient=is_transient, what="forbidden", sleep=sleeps.append)
    assert len(calls) == 1  # not retried: a 403 will not fix itself

    def broken() -> None:
        calls.append(1)
        raise ConnectionResetError("reset")

    calls.clear()
    with pytest.raises(ConnectionResetError):
        call_with_retry(broken, policy=policy, is_transient=is_transient, what="broken", sleep=lambda s: None)
    assert len(calls) == 5


# -- RBAC --------------------------------------------------------------------------------------------


def _rbac_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_rbac_role_grants_exactly_what_the_backend_uses() -> None:
    (role,) = [d for d in _rbac_docs() if d["kind"] == "Role"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    job_verbs = {"create", "get", "list", "watch", "delete", "patch"}
    read = {"get", "list", "watch"}
    assert granted == {
        ("kubeflow.org", "tfjobs"): job_verbs,
        ("kubeflow.org", "pytorchjobs"): job_verbs,
        ("kubeflow.org", "mpijobs"): job_verbs,
        ("trainer.kubeflow.org", "trainjobs"): job_verbs,
        ("trainer.kubeflow.org", "trainingruntimes"): {"get", "create"},
        ("", "pods"): read,
        ("", "pods/log"): read,
        ("", "events"): read,
    }
    text = "\n".join(p.read_text() for p in RBAC_DIR.glob("*.yaml"))
    assert "*" not in text
    # A TrainJob's ClusterTrainingRuntime is cluster-scoped: a ClusterRole grants reading it, and nothing else.
    (cluster_role,) = [d for d in _rbac_docs() if d["kind"] == "ClusterRole"]
    assert cluster_role["rules"] == [
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": ["get"]}
    ]
    (binding,) = [d for d in _rbac_docs() if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]


def test_rbac_bindings_target_the_accounts_kfp_runs_steps_as() -> None:
    """Single-user KFP runs steps as pipeline-runner; multi-user Kubeflow runs them in each profile's
    namespace as default-editor. Each binding grants exactly the launcher Role."""
    docs = _rbac_docs()
    (role,) = [d for d in docs if d["kind"] == "Role"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
    subjects = sorted((s["kind"], s["name"]) for b in bindings for s in b["subjects"])
    assert subjects == [("ServiceAccount", "default-editor"), ("ServiceAccount", "pipeline-runner")]


def test_a_crash_loop_ended_by_the_steps_timeout_names_the_replica_and_its_exit_code(
    kube: FakeKube, operator: OperatorSim
) -> None:
    def crash_loop(sim: JobSim) -> None:
        running(sim)
        for _ in range(3):  # kubelet restarts the container in place, again and again
            sim.log("worker-1", "RuntimeError: CUDA out of memory")
            sim.restart_in_place("worker-1", 137)
            sim.sleep(0.1)
        sim.wait_deleted()  # no backoffLimit: only the step's timeout ends it

    operator.scenario = crash_loop
    backend, out = make_backend(kube)
    result = backend.run(pytorch_job(workers=2), timeout=1.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout"), out.getvalue()
    assert (result.failed_replica, result.exit_code) == ("worker-1", 137)
    assert "BackOff" in result.message


# -- a TrainJob's runtime, read from the cluster before anything is created -----------------------------------

CLUSTER_TORCH = ("clustertrainingruntimes", "", "torch-distributed")


def _team_runtime(kube: FakeKube) -> dict[str, Any]:
    """Trainer's torch runtime as a namespaced TrainingRuntime ``team-torch``."""
    runtime = json.loads(json.dumps(kube.runtimes[CLUSTER_TORCH]))
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "team-torch", "namespace": "default"}
    return runtime


def _without_torch(kube: FakeKube) -> None:
    del kube.runtimes[CLUSTER_TORCH]


def _torch_is_mpi(kube: FakeKube) -> None:
    (mpi,) = [r for key, r in kube.runtimes.items() if key[2] == "deepspeed-distributed"]
    kube.runtimes[CLUSTER_TORCH] = {**mpi, "metadata": {"name": "torch-distributed"}}


def _forbidden(kube: FakeKube) -> None:
    kube.fault("403", path="/clustertrainingruntimes/torch-distributed$", times=10)


def _team_runtime_served(kube: FakeKube) -> None:
    kube.runtimes[("trainingruntimes", "default", "team-torch")] = _team_runtime(kube)


# (id, what the cluster holds, the runtime the TrainJob names, what the step says; None: the job is created)
RUNTIME_CASES: list[tuple[str, Callable[[FakeKube], None] | None, str, str | None]] = [
    ("served", None, "ClusterTrainingRuntime", None),
    ("missing", _without_torch, "ClusterTrainingRuntime", "the cluster has no ClusterTrainingRuntime named"),
    ("another-policy", _torch_is_mpi, "ClusterTrainingRuntime", "on the cluster has a mpi ML policy, but the job"),
    ("forbidden", _forbidden, "ClusterTrainingRuntime", "grant get on clustertrainingruntimes.trainer.kubeflow.org"),
    ("namespaced-served", _team_runtime_served, "TrainingRuntime", None),
    ("namespaced-missing", None, "TrainingRuntime", "no TrainingRuntime named 'team-torch' in namespace default"),
]


@pytest.mark.parametrize(
    ("cluster", "runtime_kind", "said"), [c[1:] for c in RUNTIME_CASES], ids=[c[0] for c in RUNTIME_CASES]
)
def test_a_trainjob_runtime_is_read_from_the_cluster_before_the_job_is_created(
    kube: FakeKube, cluster: Callable[[FakeKube], None] | None, runtime_kind: str, said: str | None
) -> None:
    from kftrain.job import load_manifest
    from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
    from kftrain.job.kinds.trainjob.runtime import parse_runtime

    name = "torch-distributed" if runtime_kind == "ClusterTrainingRuntime" else "team-torch"
    catalog = RuntimeCatalog([parse_runtime(_team_runtime(kube), "team-torch.yaml")])
    job = load_manifest(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj"},
            "spec": {"runtimeRef": {"name": name, "kind": runtime_kind}, "trainer": {"command": ["x"]}},
        },
        runtimes=catalog,
    )
    if cluster is not None:
        cluster(kube)
    backend, _ = make_backend(kube)
    if said is None:
        backend.submit(job)
        assert [c["kind"] for c in kube.created] == ["TrainJob"]
        return
    with pytest.raises(KftrainError) as raised:
        backend.submit(job)
    assert said in str(raised.value)
    assert kube.created == []  # nothing created

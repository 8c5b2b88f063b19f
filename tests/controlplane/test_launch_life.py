"""The launch step's whole life against the real control plane with the four operators and a node agent
(testbed/controlplane). Each test drives the launch component's own function with a pipeline's inputs, finding the
cluster through ``KUBECONFIG``; the launcher pod is a real pod (``KFP_POD_NAME``/``KFP_POD_UID``), so the job's
ownerReference points at an object the garbage collector looks up: a cancelled step deletes its job and the
collector everything the operators made; a relaunched step reattaches, and the job goes with its last launcher pod;
the step rides over an API server restart and re-lists what etcd compacted (410 Gone); a suspended TrainJob waits,
a TrainJob's progress reaches the step, an invalid pod fails it at once. In a namespace enforcing Pod Security:
test_launch_pod_security.py; the shared helpers: testbed/controlplane/launch_life.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import load_identity
from testbed.controlplane import suite
from testbed.controlplane.launch_life import (
    NAMESPACE,
    TYPED,
    all_running,
    fails_at_once,
    get_job,
    job_pods,
    left_in_namespace,
    owned_by,
    run_step_beside,
    running_job,
    succeed,
    until,
)
from testbed.controlplane.launch_life_fixtures import *  # noqa: F403 (the module's fixtures)
from testbed.controlplane.launch_life_fixtures import StepBed
from testbed.controlplane.trainer_node import node_credentials, report
from testbed.launch_cluster import LAUNCHES, Launch, start_step_process, step_inputs

pytestmark = [*suite.MARKS, pytest.mark.usefixtures("kubeconfig")]


# --- the tests --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_a_cancelled_step_deletes_its_job_and_the_collector_everything_it_made(
    launch: Launch, sigterm_outside_the_step: list[int], bed: StepBed
) -> None:
    """SIGTERM (the run cancelled, the launcher pod evicted) while every replica runs: the step deletes the job and
    exits 143; the garbage collector then deletes what the operators made for it through their ownerReferences
    (kubernetes@v1.36.3:pkg/controller/garbagecollector), background propagation being the step's
    (KubernetesConfig.propagation_policy)."""
    bed.launcher_pod("launch-step-a")
    inputs = step_inputs(launch, bed.tmp_path)
    identity = Path(inputs["job"])

    def cancel_once_running() -> None:
        running_job(bed.api, launch, identity)
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit) as ended:
        run_step_beside(cancel_once_running, launch, inputs)
    assert ended.value.code == 143
    assert sigterm_outside_the_step == []
    name = load_identity(identity).name
    assert f"deleted {launch.kind} {NAMESPACE}/{name}" in bed.capsys.readouterr().out
    until(f"{launch.kind} {name} gone", lambda: get_job(bed.api, launch, name) is None or None)
    until("the collector deleted what the operator made", lambda: not left_in_namespace(bed.api) or None)


@pytest.mark.parametrize("launch", [t for t in TYPED if t.kind in ("PyTorchJob", "TrainJob")], ids=lambda t: t.kind)
def test_a_relaunched_step_reattaches_and_the_job_goes_with_its_last_launcher_pod(launch: Launch, bed: StepBed) -> None:
    """The first launcher pod's step dies once its job exists (nothing deletes the job); KFP retries the task in a
    second pod, whose step reattaches and adds its pod as an owner. The first pod deleted, the job lives on (the
    garbage collector deletes a dependent only when none of its owners exists, and drops the reference to the one
    gone); the job succeeds and the step returns; the second pod deleted, the job and its pods go."""
    first_uid = bed.launcher_pod("launch-step-a")
    core = client.CoreV1Api(bed.api)
    core.create_namespaced_config_map(NAMESPACE, owned_by("launch-step-a", first_uid))
    first = step_inputs(launch, bed.tmp_path, job_output="job-attempt-1")
    created = _first_attempt_dies_once_its_job_exists(launch, first, bed.tmp_path)
    second_uid = bed.launcher_pod("launch-step-b")
    second = step_inputs(launch, bed.tmp_path, job_output="job-attempt-2")

    def first_pod_goes_then_job_succeeds() -> None:
        until("the second step added its pod as an owner", lambda: second_uid in _owner_uids(bed.api, launch, created))
        core.delete_namespaced_pod("launch-step-a", NAMESPACE, grace_period_seconds=0)
        until("the collector handled the first pod's deletion", lambda: _gone_config_map(core, "launch-step-a-marker"))
        assert get_job(bed.api, launch, created) is not None, "the job went with its first launcher pod"
        until(f"every pod of {created} running", lambda: all_running(bed.api, launch, created))
        succeed(bed.api, bed.node, launch, created)

    run_step_beside(first_pod_goes_then_job_succeeds, launch, second)
    out = bed.capsys.readouterr().out
    assert "reattached to" in out, out
    assert load_identity(second["job"]).name == created
    # The collector removed the reference to the deleted pod and kept the job: a dependent with a solid owner left
    # loses only its dangling references (kubernetes@v1.36.3:pkg/controller/garbagecollector/garbagecollector.go,
    # attemptToDeleteItem: "remove dangling references and waiting references for item").
    owners = _owner_uids(bed.api, launch, created)
    assert owners == [second_uid], (owners, first_uid)

    core.delete_namespaced_pod("launch-step-b", NAMESPACE, grace_period_seconds=0)
    until(f"{created} collected with its last launcher pod", lambda: get_job(bed.api, launch, created) is None or None)
    until("its pods collected", lambda: not job_pods(bed.api, launch, created) or None)


def _first_attempt_dies_once_its_job_exists(launch: Launch, inputs: dict[str, Any], tmp_path: Path) -> str:
    """The first attempt's step in a process of its own, killed (SIGKILL: its pod died) once it has created its job
    and written the job's identity; nothing gets to delete the job. The job's name."""
    proc = start_step_process(launch, inputs, tmp_path)
    try:
        until(
            "the first step wrote its job's identity", lambda: Path(inputs["job"]).exists() or proc.poll() is not None
        )
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    return load_identity(inputs["job"]).name


def _owner_uids(api_client: Any, launch: Launch, name: str) -> list[str]:
    job = get_job(api_client, launch, name) or {}
    return [o["uid"] for o in job.get("metadata", {}).get("ownerReferences") or []]


def _gone_config_map(core: Any, name: str) -> bool:
    try:
        core.read_namespaced_config_map(name, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_the_step_rides_over_an_api_server_restart_and_relists_what_etcd_compacted(bed: StepBed) -> None:
    """kube-apiserver stopped while every replica runs (a control-plane upgrade), etcd written and compacted past
    every version the step has seen meanwhile, then started again: the step's requests are refused for a while and
    retried, its watches resume from a compacted version, are answered 410 Gone and re-list; the job's end is reported
    and the step returns, with one job created."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    bed.launcher_pod("launch-step-a")
    inputs = step_inputs(launch, bed.tmp_path)
    identity = Path(inputs["job"])
    down: list[float] = []

    def compact_past_what_the_step_saw() -> None:
        # Two writes, so that the compaction point is past the revision right after the newest the step can have
        # seen: a watch resumed from version r starts at r + 1.
        bed.cluster.write_etcd("/kftrain-test/a", "1")
        bed.cluster.compact_etcd(bed.cluster.write_etcd("/kftrain-test/b", "2"))

    def restart_then_succeed() -> None:
        name = running_job(bed.api, launch, identity)
        down.append(bed.cluster.restart_apiserver(while_down=compact_past_what_the_step_saw))
        succeed(bed.api, bed.node, launch, name)

    run_step_beside(restart_then_succeed, launch, inputs)
    out = bed.capsys.readouterr().out
    name = load_identity(identity).name
    assert "expired (410 Gone); re-listing" in out, out
    assert f"{name} succeeded" in out, out
    group, version = launch.api_version.split("/")
    jobs = client.CustomObjectsApi(bed.api).list_namespaced_custom_object(group, version, NAMESPACE, launch.plural)
    assert [j["metadata"]["name"] for j in jobs["items"]] == [name]


def test_a_suspended_trainjob_waits_and_runs_once_its_queue_sets_suspend_false(bed: StepBed) -> None:
    """A TrainJob created suspended (as Kueue's webhook leaves it until its queue admits it): Trainer makes its
    JobSet suspended and no pod exists; the step waits, saying why. ``spec.suspend: false`` (what Kueue writes on
    admission) lets JobSet create the Jobs and their pods; the step follows the job to its end
    (kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go; pkg/apis/trainer/v1alpha1/trainjob_types.go,
    TrainJobSuspended = "Suspended")."""
    launch = next(t for t in TYPED if t.kind == "TrainJob")
    manifest = yaml.safe_load(
        next(m for m in LAUNCHES if m.kind == "TrainJob" and m.source == "manifest").inputs["manifest"]
    )
    manifest["spec"]["suspend"] = True
    bed.launcher_pod("launch-step-a")
    inputs = {k: v for k, v in step_inputs(launch, bed.tmp_path).items() if k not in launch.inputs}
    inputs["manifest"] = yaml.safe_dump(manifest)
    identity = Path(inputs["job"])
    custom = client.CustomObjectsApi(bed.api)
    group, version = launch.api_version.split("/")

    def admit_then_succeed() -> None:
        until("the step wrote its job's identity", identity.exists)
        name = load_identity(identity).name
        until("the TrainJob suspended", lambda: _condition(get_job(bed.api, launch, name) or {}, "Suspended") == "True")
        assert job_pods(bed.api, launch, name) == []
        custom.patch_namespaced_custom_object(
            group, version, NAMESPACE, launch.plural, name, {"spec": {"suspend": False}}
        )
        until(f"every pod of {name} running", lambda: all_running(bed.api, launch, name))
        succeed(bed.api, bed.node, launch, name)

    run_step_beside(admit_then_succeed, launch, inputs)
    out = bed.capsys.readouterr().out
    name = load_identity(identity).name
    assert "Suspended" in out and f"{name} succeeded" in out, out


def test_a_trainjobs_progress_reaches_the_step_through_trainers_status_server(bed: StepBed) -> None:
    """A TrainJob's trainer node posts its progress twice to the endpoint Trainer gave it (its status server, which
    authenticates the node's projected token through the API server's OpenID discovery and applies the report to
    ``status.trainerStatus``); the step, watching the TrainJob, says each and puts the last into its Metrics output,
    as it does with kftrain's local status server (tests/launch/test_trainjob_cluster.py on the fake cluster)."""
    launch = next(t for t in TYPED if t.kind == "TrainJob")
    bed.launcher_pod("launch-step-a")
    inputs = step_inputs(launch, bed.tmp_path)
    identity = Path(inputs["job"])

    def report_then_succeed() -> None:
        name = running_job(bed.api, launch, identity)
        (pod, *_) = job_pods(bed.api, launch, name)
        credentials = node_credentials(bed.api, bed.api.sanitize_for_serialization(pod))
        for pct, loss in ((40, "0.5"), (100, "0.125")):
            status = {
                "progressPercentage": pct,
                "estimatedRemainingSeconds": 100 - pct,
                "metrics": [{"name": "loss", "value": loss}, {"name": "accuracy", "value": "0.9"}],
                "lastUpdatedTime": "2026-11-28T03:00:00Z",
            }
            answer = report(credentials, status)
            assert answer.code == 200, answer.body
            until(f"{name}'s trainerStatus at {pct}%", lambda pct=pct: _progress(bed.api, launch, name) == pct)
        succeed(bed.api, bed.node, launch, name)

    run_step_beside(report_then_succeed, launch, inputs)
    out = bed.capsys.readouterr().out
    assert "progress: 40% loss 0.5 accuracy 0.9 | eta 1m00s (trainer status)" in out, out
    assert "progress: 100% loss 0.125 accuracy 0.9 | eta 0s (trainer status)" in out, out
    assert inputs["metrics"].metadata == {"loss": 0.125, "accuracy": 0.9, "progress_percentage": 100.0}


def _progress(api: Any, launch: Launch, name: str) -> Any:
    """The progress on the job's ``status.trainerStatus`` (None: none)."""
    status = ((get_job(api, launch, name) or {}).get("status") or {}).get("trainerStatus") or {}
    return status.get("progressPercentage")


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def test_a_pod_the_api_server_finds_invalid_fails_the_step_at_once(bed: StepBed) -> None:
    """A manifest whose Worker template breaks a pod rule kftrain does not model (``dnsPolicy``: the CRD's schema
    takes any string; ValidatePodSpec does not): the CRD admits the job, the training-operator creates the Master
    and is refused every Worker (`Pod "..." is invalid`), and the job never gets a status. The step fails within
    seconds with the API server's words and deletes the job, rather than waiting out its timeout."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    manifest = yaml.safe_load(
        next(m for m in LAUNCHES if m.kind == "PyTorchJob" and m.source == "manifest").inputs["manifest"]
    )
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["dnsPolicy"] = "Bogus"
    bed.launcher_pod("launch-step-a")
    inputs = {k: v for k, v in step_inputs(launch, bed.tmp_path).items() if k not in launch.inputs}
    inputs["manifest"] = yaml.safe_dump(manifest)
    identity = Path(inputs["job"])

    def master_runs() -> None:
        until("the step wrote its job's identity", identity.exists)
        name = load_identity(identity).name
        until(f"{name}'s master running", lambda: all_running(bed.api, launch, name))

    said = fails_at_once(lambda: run_step_beside(master_runs, launch, inputs), bed.api, launch, identity, bed.capsys)
    assert "refused the job's pods as invalid" in said and 'spec.dnsPolicy: Unsupported value: "Bogus"' in said, said

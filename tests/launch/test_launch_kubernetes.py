"""The launch components on the Kubernetes backend, end to end, as a pipeline runs them (testbed/launch_cluster.py).

Each test calls a launch component's own Python function with the inputs a pipeline gives it, on the fake API
server with a simulated operator playing the job; the table of kinds, inputs and outcomes is described in the
comment below the imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.base import load_identity
from kftrain.job.kinds import kind_for
from kftrain.job.naming import (
    RUN_ID_ANNOTATION,
    RUN_ID_LABEL,
    TASK_ID_ANNOTATION,
    TASK_ID_LABEL,
    job_name_for,
    label_value,
)
from testbed.clock import VirtualClock
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim, kueue_webhook
from testbed.launch_cluster import (
    IMAGE,
    LAUNCHES,
    RUN_ID,
    TASK_ID,
    Launch,
    assert_logs_kept,
    assert_no_secret_anywhere,
    expected_namespace,
    read_back,
    s_success,
    start,
    step_inputs,
    succeed,
    until_step_says,
)
from testbed.launch_harness import SETTINGS
from testbed.reference import crd_schemas

# Each test calls a launch component's own Python function (what KFP runs in the step's container) with the
# inputs a pipeline gives it: the dataset and model artifacts, the path of its ``job`` output, the run and
# task ids, the platform settings, ``backend="kubernetes"``, and either the typed inputs or a manifest; the
# cluster is the fake API server (testbed/fake_k8s) and a simulated operator plays the job.
#
# The table: the four kinds (PyTorchJob, TFJob, MPIJob, Trainer v2's TrainJob on a simulated Trainer + JobSet) x
# {typed inputs, manifest} (:data:`LAUNCHES`) x what the cluster does
# (:data:`OUTCOMES`): the job succeeds at once, a replica fails, the image cannot be pulled, Kueue holds the
# job then admits it, the cluster autoscaler adds a node, no node fits past ``pending_timeout_seconds``. The step
# waits on a virtual clock (testbed/clock.py): its pending timeout passes when the scenario advances the time.
# Every run also checks that a secret value in the launcher's environment reaches no created object and no
# output, and that every platform setting lands where the kind takes it.


def s_succeeds(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    s_success(sim, launch)


def s_failure(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    label = launch.failing
    start(sim)
    sim.log(label, "step 1", "Traceback (most recent call last):", f"RuntimeError: {label} ran out of memory")
    sim.exit(label, 3)
    # cleanPodPolicy Running (the step's default): the operator deletes the pods still running.
    with sim.kube.cond:
        for (ns, name), pod in list(sim.kube.pods.items()):
            if name in sim.pod_names.values() and pod["status"]["phase"] == "Running":
                sim.kube.delete_pod(ns, name)
    sim.condition("Failed", reason=f"{sim.obj['kind']}Failed", message=f"{label} failed with exit code 3")


def s_image_not_found(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.image_pull_backoff(sim.labels()[-1])
    sim.wait_deleted()


def s_queued_then_admitted(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    """Kueue's webhook suspended the job at creation; Kueue admits it once the step says it waits for that."""
    sim.condition("Created")
    assert sim.suspended, "Kueue's webhook suspends a job created with its queue-name label"
    sim.report_suspended()
    until_step_says(sim, "waiting: suspended until Kueue admits it from LocalQueue 'team-a'")
    sim.admit_from_queue()
    sim.report_resumed()
    start(sim)
    succeed(sim)


def no_node_fits(sim: JobSim, scale_up: bool) -> None:
    """Every pod created unschedulable; the cluster autoscaler adds a node for them (``scale_up``), or cannot.
    The step sees the pods with both verdicts on them at once, and has seen them once it says so: the pending
    timeout starts then."""
    with sim.at_once():
        sim.create_pods(scheduled=False)
        sim.condition("Created")
        for label in sim.labels():
            sim.unschedulable(label)
            sim.autoscaler(label, triggered=scale_up)
    until_step_says(sim, "Unschedulable: 0/3 nodes are available")


def s_scaled_up(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    """No node fits the pods until the cluster autoscaler adds one, which takes longer than pending_timeout."""
    no_node_fits(sim, scale_up=True)
    clock.advance(PENDING_TIMEOUT_S)  # unscheduled for the pending timeout: the step reads the autoscaler's events
    until_step_says(sim, "waiting for the cluster autoscaler to add a node")
    for _ in range(3):  # the new node takes three pending timeouts (the step reads the events again meanwhile)
        clock.advance(PENDING_TIMEOUT_S)
        # The step has looked at the pods at this time, and waits on.
        assert clock.settle(unless=lambda: not sim.alive), "the step gave up on pods a node is being added for"
    sim.schedule()
    sim.start()
    sim.condition("Running")
    succeed(sim)


def s_unschedulable(sim: JobSim, launch: Launch, clock: VirtualClock) -> None:
    no_node_fits(sim, scale_up=False)
    clock.advance(PENDING_TIMEOUT_S / 2)
    assert clock.settle(unless=lambda: not sim.alive), "the step gave up before the pending timeout"
    clock.advance(PENDING_TIMEOUT_S / 2)
    sim.wait_deleted(timeout=20)  # on the clock's move: no real time to wait for


PENDING_TIMEOUT_S = 1  # pending_timeout_seconds (an integer input): the virtual clock moves by it


@dataclass(frozen=True)
class Outcome:
    """What the cluster does with the job, and what the step must then do and say."""

    id: str
    scenario: Callable[[JobSim, Launch, VirtualClock], None]
    exit_code: int | None  # the step's SystemExit code; None: the step returns (the job succeeded)
    deleted_by_step: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)
    kueue: bool = False  # Kueue's webhook is installed
    # Log lines every replica wrote ({label}: the replica's), expected in the step's output as "[label] line".
    replica_lines: tuple[str, ...] = ()
    # Expected in the step's stdout / stderr; {failing} and {image} are filled in.
    out_has: tuple[str, ...] = ()
    err_has: tuple[str, ...] = ()
    check: Callable[[FakeKube, Launch, dict[str, Any]], None] | None = None


def check_success(kube: FakeKube, launch: Launch, inputs: dict[str, Any]) -> None:
    (created,) = kube.created
    handle = load_identity(inputs["job"])
    assert handle.name == created["metadata"]["name"] == job_name_for(RUN_ID, TASK_ID, base=launch.base_name)
    assert (handle.backend, handle.kind, handle.uid) == ("kubernetes", launch.kind, created["metadata"]["uid"])
    assert handle.namespace == created["metadata"]["namespace"] == expected_namespace()
    job = read_back(kube, launch, handle.name)
    assert crd_schemas().errors(job) == []
    check_identity(job)
    check_settings = check_trainjob_settings if launch.kind == "TrainJob" else check_replica_settings
    check_settings(job, launch)
    assert inputs["model"].metadata["job"] == handle.name


def check_identity(job: dict[str, Any]) -> None:
    meta = job["metadata"]
    assert meta["labels"][RUN_ID_LABEL] == label_value(RUN_ID)
    assert meta["labels"][TASK_ID_LABEL] == label_value(TASK_ID)
    assert meta["annotations"][RUN_ID_ANNOTATION] == RUN_ID
    assert meta["annotations"][TASK_ID_ANNOTATION] == TASK_ID
    assert [o["uid"] for o in meta["ownerReferences"]] == ["uid-a"]  # the launcher pod, from KFP_POD_UID


def check_replica_settings(job: dict[str, Any], launch: Launch) -> None:
    """Every platform input on the job and on every replica's pod template (the training-operator's kinds)."""
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    run_policy = job["spec"]["runPolicy"]
    assert run_policy["schedulingPolicy"] == {"queue": "volcano-a", "minAvailable": 2}
    assert run_policy["ttlSecondsAfterFinished"] == 600
    for rtype, rspec in job["spec"][kind_for(launch.kind, launch.api_version).spec.replica_key].items():
        template = rspec["template"]
        check_run_labels(template)
        main = template["spec"]["containers"][0]
        assert main["image"] == IMAGE
        check_pod(template["spec"], main, main, launch, trains=rtype != launch.not_training, where=rtype)


def check_trainjob_settings(job: dict[str, Any], launch: Launch) -> None:
    """Every platform input where Trainer v2 takes it: the trainer's fields for its container, a runtime patch
    for the pods of the runtime's ``node`` job (the webhook refuses ``env`` there: it stays the trainer's)."""
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == IMAGE and trainer["numNodes"] == 2
    if launch.source == "typed":  # this release's PyTorch trainer under the runtime's torchrun
        assert trainer["command"] == ["torchrun", "-m", "kftrain.programs.torch_ddp"]
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "kftrain.io/launch"
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    template = node["template"]["spec"]["template"]
    check_run_labels(template)
    (patched,) = template["spec"]["containers"]
    assert "env" not in patched
    trainer_container = {"env": trainer["env"], "resources": trainer["resourcesPerNode"]}
    check_pod(template["spec"], patched, trainer_container, launch, trains=True, where="node")


def check_run_labels(template: dict[str, Any]) -> None:
    """The run's and task's ids on a pod template, so every pod of the job can be found by them."""
    labels = template["metadata"]["labels"]
    assert (labels[RUN_ID_LABEL], labels[TASK_ID_LABEL]) == (label_value(RUN_ID), label_value(TASK_ID))


def check_pod(
    pod: dict[str, Any], mounts_from: dict[str, Any], main: dict[str, Any], launch: Launch, trains: bool, where: str
) -> None:
    """The pod-level settings on ``pod``, the mounts on its container ``mounts_from``, the environment and
    resources on ``main`` (the container, or where the kind keeps them)."""
    assert pod["serviceAccountName"] == "trainer", where
    assert pod["nodeSelector"] == {"pool": "gpu"}, where
    assert pod["tolerations"] == SETTINGS["tolerations"], where
    assert pod["imagePullSecrets"] == [{"name": "regcred"}], where
    assert pod.get("priorityClassName") == launch.settings.get("priority_class"), where
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pvc-datasets"]["persistentVolumeClaim"] == {"claimName": "datasets"}, where
    assert volumes["kftrain-object-store"]["secret"]["secretName"] == "mlpipeline-minio-artifact", where
    assert ("kftrain-shm" in volumes) is trains, where
    mounts = {m["mountPath"] for m in mounts_from["volumeMounts"]}
    assert {"/data", "/var/run/secrets/kftrain/object-store"} <= mounts and ("/dev/shm" in mounts) is trains
    limits = main["resources"]["limits"]
    assert (limits["cpu"], limits["memory"]) == ("2", "4Gi"), where
    assert ("nvidia.com/gpu" in limits) is trains, where
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in main["env"]}
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}, where
    for name, key in (("AWS_ACCESS_KEY_ID", "accesskey"), ("AWS_SECRET_ACCESS_KEY", "secretkey")):
        ref = {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key, "optional": True}}
        assert env[name] == ref, (where, name)


def suspended_at_creation(job: dict[str, Any]) -> bool:
    """The job's suspend field: a TrainJob's own, the training-operator kinds' in their run policy."""
    spec = job["spec"]
    return bool(spec["suspend"] if "suspend" in spec else spec["runPolicy"]["suspend"])


def check_queued(kube: FakeKube, launch: Launch, inputs: dict[str, Any]) -> None:
    (created,) = kube.created
    assert suspended_at_creation(created)  # as Kueue's webhook left it
    assert not suspended_at_creation(read_back(kube, launch, created["metadata"]["name"]))


OUTCOMES = [
    Outcome(
        "succeeds at once",
        s_succeeds,
        exit_code=None,
        replica_lines=("hello from {label}", "{label} done"),
        check=check_success,
    ),
    Outcome(
        "replica fails",
        s_failure,
        exit_code=3,
        err_has=(
            "last 3 log lines of {failing}",
            "Traceback (most recent call last):",
            "RuntimeError: {failing} ran out of memory",
            "{failing} failed with exit code 3",
        ),
    ),
    Outcome(
        "image not found",
        s_image_not_found,
        exit_code=1,
        deleted_by_step=True,
        # The kubelet says ErrImagePull, then ImagePullBackOff: the step fails on whichever it sees first.
        err_has=("cannot start: ", "ImagePull", "image {image}", f'image "{IMAGE}"'),
    ),
    Outcome(
        "queued by Kueue, then admitted",
        s_queued_then_admitted,
        exit_code=None,
        kueue=True,
        out_has=("waiting: suspended until Kueue admits it from LocalQueue 'team-a'",),
        replica_lines=("hello from {label}",),
        check=check_queued,
    ),
    Outcome(
        "scaled up past the pending timeout",
        s_scaled_up,
        exit_code=None,
        inputs={"pending_timeout_seconds": PENDING_TIMEOUT_S},
        out_has=(
            "waiting for the cluster autoscaler to add a node: pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]",
        ),
        replica_lines=("hello from {label}",),
    ),
    Outcome(
        "unschedulable past the pending timeout",
        s_unschedulable,
        exit_code=1,
        deleted_by_step=True,
        inputs={"pending_timeout_seconds": PENDING_TIMEOUT_S},
        out_has=("Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "fails if this lasts 1s"),
        err_has=("stayed Pending for", "(pending_timeout_seconds 1): Unschedulable", "deleted the job"),
    ),
]


def _filled(text: str, launch: Launch) -> str:
    return text.replace("{failing}", launch.failing).replace("{image}", IMAGE)


@pytest.mark.parametrize("outcome", OUTCOMES, ids=[o.id for o in OUTCOMES])
@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.id for launch in LAUNCHES])
def test_step(
    launch: Launch,
    outcome: Outcome,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    virtual_clock: VirtualClock,
) -> None:

    def play(sim: JobSim) -> None:
        try:
            outcome.scenario(sim, launch, virtual_clock)
        except AssertionError:
            # The step may wait for what the scenario expected on a clock that no one moves any more: deleting the
            # job ends its wait, and the test fails on the scenario's error (the operator fixture's) instead of
            # hanging.
            sim.kube.delete_job(sim.plural, sim.namespace, sim.name)
            raise

    operator.scenario = play
    if outcome.kueue:
        kube.admission.append(kueue_webhook)
    inputs = step_inputs(launch, tmp_path, **outcome.inputs)
    if outcome.exit_code is None:
        launch.component.python_func(**inputs)  # returns: the job succeeded
    else:
        with pytest.raises(SystemExit) as ended:
            launch.component.python_func(**inputs)
        assert ended.value.code == outcome.exit_code
    operator.join()
    out, err = capsys.readouterr()
    for text in outcome.out_has:
        assert _filled(text, launch) in out, out
    for text in outcome.err_has:
        assert _filled(text, launch) in err, err
    for label in (label for sim in operator.sims for label in sim.labels()):
        for line in outcome.replica_lines:
            assert f"[{label}] {line.replace('{label}', label)}" in out, out  # every replica's log, prefixed
    assert_logs_kept(out, tmp_path / "model-logs", [label for sim in operator.sims for label in sim.labels()])
    (created,) = kube.created
    name = created["metadata"]["name"]
    assert [d[2] for d in kube.deletions] == ([name] if outcome.deleted_by_step else [])
    if outcome.check is not None:
        outcome.check(kube, launch, inputs)
    assert_no_secret_anywhere(kube, out, err)


def test_an_elastic_pytorchjob_reaches_the_cluster_with_its_policy_queue_and_scheduling(
    kube: FakeKube, operator: OperatorSim, kubeconfig: Path, tmp_path: Path
) -> None:
    """Fair share across jobs is the scheduler's: the elastic job carries the Kueue queue label and the Volcano
    schedulingPolicy the platform inputs ask for, beside the elasticPolicy the operator scales it within."""
    elastic = {
        "workers": 3,
        "image": IMAGE,
        "elastic_min_workers": 2,
        "elastic_max_workers": 4,
        "elastic_rdzv_conf": {"last_call_timeout": "30"},
        "priority_class": "batch-low",
    }
    launch = next(x for x in LAUNCHES if x.id == "PyTorchJob-typed")
    launch = dataclasses.replace(launch, inputs=elastic)
    operator.scenario = lambda sim: s_success(sim, launch)
    launch.component.python_func(**step_inputs(launch, tmp_path))

    (created,) = kube.created
    assert crd_schemas().errors(created) == []
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    spec = created["spec"]
    assert spec["runPolicy"]["schedulingPolicy"] == {"queue": "volcano-a", "minAvailable": 2}
    assert spec["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "rdzvConf": [{"key": "last_call_timeout", "value": "30"}],
        "maxRestarts": 3,
    }
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    pod = worker["template"]["spec"]
    assert pod["priorityClassName"] == "batch-low"
    assert pod["containers"][0]["command"] == ["torchrun", "--module", "kftrain.programs.torch_ddp"]

"""The launch components on the Kubernetes backend, end to end, as a pipeline runs them.

Each test calls a launch component's own Python function (what KFP runs in the step's container) with the
inputs a pipeline gives it: the dataset and model artifacts, the path of its ``job`` output, the run and
task ids, the platform settings, ``backend="kubernetes"``, and either the typed inputs or a manifest. The
step finds the cluster as it would outside a pod, through the kubeconfig that ``KUBECONFIG`` names; the
cluster is the fake API server (tests/fake_k8s) and a simulated operator plays the job. Nothing is
configured for the test: the backend runs with its production :class:`KubernetesConfig`.

The table: the four kinds (PyTorchJob, TFJob, MPIJob, Trainer v2's TrainJob on a simulated Trainer + JobSet) x
{typed inputs, manifest} (:data:`LAUNCHES`) x what the cluster does
(:data:`OUTCOMES`): the job succeeds at once, a replica fails, the image cannot be pulled, Kueue holds the
job then admits it, the cluster autoscaler adds a node, no node fits past ``pending_timeout_seconds``.
Every run also checks that a secret value in the launcher's environment reaches no created object and no
output. A relaunched step and a SIGTERMed one are tested per launch too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client

import kftrain
import kftrain_components
from kftrain.backends.base import load_identity
from kftrain.backends.kubernetes.config import SERVICE_ACCOUNT_NAMESPACE
from kftrain.job.kinds import kind_for
from kftrain.job.naming import (
    RUN_ID_ANNOTATION,
    RUN_ID_LABEL,
    TASK_ID_ANNOTATION,
    TASK_ID_LABEL,
    job_name_for,
    label_value,
)
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from tests.fake_k8s import FakeKube, JobSim, OperatorSim, kueue_webhook
from tests.fake_k8s.server import load_crd_schemas
from tests.launch_harness import SETTINGS, manifest_text, replica_spec

REPO_ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = REPO_ROOT.parent / "shared/reference/crds"
KUBECONFIG_NAMESPACE = "kfp-user"
RUN_ID = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345"
TASK_ID = "9a8b7c6d-0000-1111-2222-333344445555"
IMAGE = "registry.example.com/team/train:1"
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
# A secret's value in the launcher's own environment: it must reach no job, no pod and no output.
CANARY = "canary-7d1e5b-never-print-me"

TRAIN = {"image": IMAGE, "command": ["python", "train.py"]}
PYTORCH_MANIFEST = manifest_text(
    "kubeflow.org/v1",
    "PyTorchJob",
    "ddp",
    {"pytorchReplicaSpecs": {rtype: replica_spec(1, name="pytorch", **TRAIN) for rtype in ("Master", "Worker")}},
)
TF_MANIFEST = manifest_text(
    "kubeflow.org/v1", "TFJob", "mwms", {"tfReplicaSpecs": {"Worker": replica_spec(2, name="tensorflow", **TRAIN)}}
)
MPI_MANIFEST = manifest_text(
    "kubeflow.org/v2beta1",
    "MPIJob",
    "allreduce",
    {
        "slotsPerWorker": 1,
        "mpiReplicaSpecs": {
            "Launcher": replica_spec(1, name="launcher", image=IMAGE, command=["mpirun", "python", "train.py"]),
            "Worker": replica_spec(2, name="worker", image=IMAGE),
        },
    },
)
TRAINJOB_MANIFEST = f"""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: ddp-v2}}
spec:
  runtimeRef: {{name: torch-distributed}}
  trainer: {{numNodes: 2, image: "{IMAGE}", command: [torchrun, train.py]}}
"""


@dataclass(frozen=True)
class Launch:
    """One launch component, given typed inputs or a manifest."""

    component: Any
    kind: str
    api_version: str
    plural: str
    source: str  # "typed" or "manifest"
    inputs: dict[str, Any]
    # The replica the failure scenario fails: the one whose exit ends the job for its operator.
    failing: str
    # Where the platform settings land on the created job: checks them all.
    check_settings: Callable[[dict[str, Any], Launch], None]
    # The replica type that runs no training (the MPI launcher): no GPU and no /dev/shm.
    not_training: str | None = None
    # The platform inputs the component does not take (SETTINGS minus these are given).
    not_taken: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.source}"

    @property
    def base_name(self) -> str:
        """The job's name before the run's: the manifest's own, else the kind's."""
        if self.source == "manifest":
            return str(yaml.safe_load(self.inputs["manifest"])["metadata"]["name"])
        return self.kind.lower()

    @property
    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in SETTINGS.items() if k not in self.not_taken}


def _launches() -> list[Launch]:
    operator_v1 = "kubeflow.org/v1"
    # A TrainJob's run policy is its runtime's (no Volcano scheduling policy, no TTL input), and Trainer v2.3.0's
    # pod patch has no priorityClassName (the step refuses it: the runtime sets it).
    not_on_trainjob = ("scheduling", "ttl_seconds_after_finished", "priority_class")
    kinds = [
        (pytorchjob_launch, "PyTorchJob", operator_v1, "pytorchjobs", {"workers": 1}, PYTORCH_MANIFEST, "worker-0"),
        (tfjob_launch, "TFJob", operator_v1, "tfjobs", {"workers": 2}, TF_MANIFEST, "worker-1"),
        (mpijob_launch, "MPIJob", "kubeflow.org/v2beta1", "mpijobs", {"workers": 2}, MPI_MANIFEST, "launcher-0"),
        (trainjob_launch, "TrainJob", TRAINJOB_API, "trainjobs", {"num_nodes": 2}, TRAINJOB_MANIFEST, "node-1"),
    ]
    out = []
    for component, kind, api_version, plural, replicas, manifest, failing in kinds:
        trainjob = kind == "TrainJob"
        for source, inputs in (("typed", {**replicas, "image": IMAGE}), ("manifest", {"manifest": manifest})):
            out.append(
                Launch(
                    component,
                    kind,
                    api_version,
                    plural,
                    source,
                    inputs,
                    failing,
                    check_trainjob_settings if trainjob else check_replica_settings,
                    not_training="Launcher" if kind == "MPIJob" else None,
                    not_taken=not_on_trainjob if trainjob else (),
                )
            )
    return out


# -- the cluster, as the step finds it -------------------------------------------------------------


@pytest.fixture
def kubeconfig(kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig whose current context is the fake cluster, named by ``KUBECONFIG``; not in a pod, in KFP.

    The launcher's environment also holds a secret's value (:data:`CANARY`) under the names a platform
    gives secrets, so that a test can show it goes nowhere.
    """
    path = kube.write_kubeconfig(tmp_path / "kubeconfig", KUBECONFIG_NAMESPACE, user="pipeline-runner")
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no in-cluster configuration
    monkeypatch.setenv("KFP_POD_NAME", "launch-step-a")
    monkeypatch.setenv("KFP_POD_UID", "uid-a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    return path


def expected_namespace() -> str:
    """This pod's namespace when the tests run in one (the backend prefers it), else the kubeconfig's."""
    if SERVICE_ACCOUNT_NAMESPACE.is_file() and SERVICE_ACCOUNT_NAMESPACE.read_text().strip():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return KUBECONFIG_NAMESPACE


class KfpMetrics(SimpleNamespace):
    """A KFP Metrics output: its values in ``metadata``, as KFP keeps them."""

    def log_metric(self, metric: str, value: float) -> None:
        self.metadata[metric] = value


def step_inputs(launch: Launch, tmp_path: Path, job_output: str = "job", **extra: Any) -> dict[str, Any]:
    """The inputs a pipeline gives the step: artifacts, the ``job`` output path, the run and task ids, the
    platform settings, and the launch's typed inputs or manifest."""
    return {
        "dataset_uri": str(tmp_path / "dataset"),
        "model": SimpleNamespace(uri=str(tmp_path / "model"), metadata={}),
        "job": str(tmp_path / "outputs" / job_output),
        "metrics": KfpMetrics(uri=str(tmp_path / "outputs" / "metrics"), metadata={}),
        "curves": SimpleNamespace(uri=str(tmp_path / "outputs" / "curves"), metadata={}, path=""),
        "run_id": RUN_ID,
        "task_id": TASK_ID,
        "backend": "kubernetes",
        **launch.settings,
        **launch.inputs,
        **extra,
    }


def read_back(kube: FakeKube, launch: Launch, name: str) -> dict[str, Any]:
    """The job as the API serves it (GET over HTTP)."""
    api = client.ApiClient(client.Configuration(host=kube.url))
    group, version = launch.api_version.split("/")
    return dict(
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, expected_namespace(), launch.plural, name
        )
    )


def step_output() -> str:
    """What the step has printed so far (the test captures standard output: see ``capsys``)."""
    getvalue = getattr(sys.stdout, "getvalue", None)
    return str(getvalue()) if getvalue is not None else ""


def until_step_says(sim: JobSim, text: str, timeout: float = 20.0) -> None:
    """Wait (as the simulated cluster) until the step's output shows ``text``: it has seen what it reports."""
    end = time.monotonic() + timeout
    while text not in step_output():
        assert time.monotonic() < end, f"the step did not say {text!r} within {timeout}s:\n{step_output()}"
        sim.sleep(0.02)


# -- what the cluster does -------------------------------------------------------------------------


def start(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.start()
    sim.condition("Running")


def succeed(sim: JobSim) -> None:
    for label in sim.labels():
        sim.log(label, f"hello from {label}", f"{label} done")
    sim.write_model()
    sim.exit_all(0)
    sim.condition("Succeeded")


def s_success(sim: JobSim, launch: Launch) -> None:
    """The job runs and succeeds at once: the step may never see a pod running."""
    start(sim)
    succeed(sim)


def s_failure(sim: JobSim, launch: Launch) -> None:
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


def s_image_not_found(sim: JobSim, launch: Launch) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.image_pull_backoff(sim.labels()[-1])
    sim.wait_deleted()


def s_queued_then_admitted(sim: JobSim, launch: Launch) -> None:
    """Kueue's webhook suspended the job at creation; Kueue admits it once the step says it waits for that."""
    sim.condition("Created")
    assert sim.suspended, "Kueue's webhook suspends a job created with its queue-name label"
    sim.report_suspended()
    until_step_says(sim, "waiting: suspended until Kueue admits it from LocalQueue 'team-a'")
    sim.admit_from_queue()
    sim.report_resumed()
    start(sim)
    succeed(sim)


def s_scaled_up(sim: JobSim, launch: Launch) -> None:
    """No node fits the pods until the cluster autoscaler adds one, which takes longer than pending_timeout."""
    sim.create_pods(scheduled=False)
    sim.condition("Created")
    for label in sim.labels():
        sim.unschedulable(label)
        sim.autoscaler(label, triggered=True)
    until_step_says(sim, "waiting for the cluster autoscaler to add a node")
    sim.sleep(PENDING_TIMEOUT_S + 0.2)  # the new node takes longer than the pending timeout: the step waits on
    sim.schedule()
    sim.start()
    sim.condition("Running")
    succeed(sim)


def s_unschedulable(sim: JobSim, launch: Launch) -> None:
    sim.create_pods(scheduled=False)
    sim.condition("Created")
    for label in sim.labels():
        sim.unschedulable(label)
        sim.autoscaler(label, triggered=False)
    sim.wait_deleted()


PENDING_TIMEOUT_S = 1  # the least pending_timeout_seconds (an integer input): pending tests stay short


@dataclass(frozen=True)
class Outcome:
    """What the cluster does with the job, and what the step must then do and say."""

    id: str
    scenario: Callable[[JobSim, Launch], None]
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
    assert load_crd_schemas(CRD_DIR).errors(job) == []
    check_identity(job)
    launch.check_settings(job, launch)
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
        s_success,
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


def assert_logs_kept(out: str, logs: Path, replicas: list[str]) -> None:
    """Every replica line the step streamed is in that replica's log kept beside the model, in order; a replica
    of the job that printed nothing has an empty one."""
    streamed: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("[") and not line.startswith("[kftrain]") and "] " in line:
            label, text = line[1:].split("] ", 1)
            streamed.setdefault(label, []).append(text)
    kept = {p.stem: p.read_text().splitlines() for p in logs.iterdir()} if logs.exists() else {}
    assert {label: lines for label, lines in kept.items() if lines} == streamed, (kept, streamed)
    assert set(kept) <= set(replicas), kept


def assert_no_secret_anywhere(kube: FakeKube, *outputs: str) -> None:
    with kube.cond:
        objects = json.dumps([kube.created, list(kube.jobs.values()), list(kube.pods.values())])
    assert CANARY not in objects
    for text in outputs:
        assert CANARY not in text


LAUNCHES = _launches()


# -- tests -----------------------------------------------------------------------------------------


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
) -> None:
    operator.scenario = lambda sim: outcome.scenario(sim, launch)
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


# -- a relaunched step, a cancelled one ----------------------------------------------------------------


def s_until_a_second_owner(sim: JobSim) -> None:
    """Runs until a relaunched step has reattached (it adds its pod as an owner), then succeeds."""
    start(sim)
    end = time.monotonic() + 30
    while len(_owners(sim)) < 2:
        assert time.monotonic() < end, "no second launcher reattached within 30 s"
        sim.log(sim.labels()[0], "training")
        sim.sleep(0.05)
    succeed(sim)


def _owners(sim: JobSim) -> list[dict[str, Any]]:
    with sim.kube.cond:
        obj = sim.kube.jobs.get((sim.plural, sim.namespace, sim.name)) or {}
        return list((obj.get("metadata") or {}).get("ownerReferences") or [])


STEP_SCRIPT = textwrap.dedent(
    """
    import importlib, json, sys
    from types import SimpleNamespace

    module, name, inputs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    component = getattr(importlib.import_module(module), name)
    for artifact in ("model", "curves"):
        inputs[artifact] = SimpleNamespace(uri=inputs[artifact], metadata={}, path="")
    inputs["metrics"] = SimpleNamespace(uri=inputs["metrics"], metadata={}, log_metric=lambda name, value: None)
    component.python_func(**inputs)
    """
)


def start_step_process(launch: Launch, inputs: dict[str, Any], tmp_path: Path) -> subprocess.Popen[str]:
    """The step's function in its own process (the launcher pod), with this process's environment."""
    script = tmp_path / "step.py"
    script.write_text(STEP_SCRIPT)
    args = {k: (v.uri if isinstance(v, SimpleNamespace) else v) for k, v in inputs.items()}
    imported_from = [str(Path(kftrain.__file__).parents[1]), str(Path(kftrain_components.__file__).parents[1])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*imported_from, os.environ.get("PYTHONPATH", "")])}
    module = launch.component.python_func.__module__
    return subprocess.Popen(
        [sys.executable, str(script), module, launch.component.python_func.__name__, json.dumps(args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.id for launch in LAUNCHES])
def test_relaunched_step_reattaches_to_its_job(
    launch: Launch,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    operator.scenario = s_until_a_second_owner
    first = step_inputs(launch, tmp_path, job_output="job-attempt-1")
    proc = start_step_process(launch, first, tmp_path)
    try:
        end = time.monotonic() + 30
        while not Path(first["job"]).exists():  # the job is created and the step about to wait for it
            assert proc.poll() is None and time.monotonic() < end, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.02)
        proc.kill()  # the launcher pod dies: nothing gets to delete the job
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(kube.jobs_of(launch.plural)) == 1

    monkeypatch.setenv("KFP_POD_NAME", "launch-step-b")  # KFP retries the task in a new pod
    monkeypatch.setenv("KFP_POD_UID", "uid-b")
    second = step_inputs(launch, tmp_path, job_output="job-attempt-2")
    launch.component.python_func(**second)  # returns once the job it reattached to succeeds

    assert "reattached to" in capsys.readouterr().out
    assert len(kube.created) == 1  # exactly one job
    (job,) = kube.jobs_of(launch.plural)
    assert load_identity(second["job"]) == load_identity(first["job"])
    assert load_identity(second["job"]).name == job["metadata"]["name"]
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == ["uid-a", "uid-b"]


@pytest.fixture
def sigterm_outside_the_step() -> Iterator[list[int]]:
    """SIGTERM outside the step's wait is recorded instead of ending the test run (the step installs its own)."""
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, record)
    yield received
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.id for launch in LAUNCHES])
def test_sigterm_during_the_wait_deletes_the_job(
    launch: Launch,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sigterm_outside_the_step: list[int],
) -> None:
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])

    def run_until_terminated(sim: JobSim) -> None:
        start(sim)
        sim.log(sim.labels()[0], "step 1")
        until_step_says(sim, "step 1")  # the step is in its wait, streaming the log
        assert identity.exists()
        os.kill(os.getpid(), signal.SIGTERM)  # the run is cancelled, or the launcher pod evicted
        n = 1
        while True:
            n += 1
            sim.log(sim.labels()[0], f"step {n}")
            sim.sleep(0.05)

    operator.scenario = run_until_terminated
    assert threading.current_thread() is threading.main_thread()  # where the step's SIGTERM handler runs
    with pytest.raises(SystemExit) as ended:
        launch.component.python_func(**inputs)
    assert ended.value.code == 143  # as a shell reports the signal (128 + 15)
    assert sigterm_outside_the_step == []
    out, err = capsys.readouterr()
    name = load_identity(identity).name
    assert f"deleted {launch.kind} {expected_namespace()}/{name}" in out
    assert "terminated (run cancelled or pod evicted)" in err
    assert_logs_kept(out, tmp_path / "model-logs", [label for sim in operator.sims for label in sim.labels()])
    assert "step 1" in (tmp_path / "model-logs" / f"{operator.sims[0].labels()[0]}.log").read_text()
    assert [d[2] for d in kube.deletions] == [name] and kube.jobs_of(launch.plural) == []


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
    assert load_crd_schemas(CRD_DIR).errors(created) == []
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

"""The launch components on the Kubernetes backend, end to end, as a pipeline runs them.

Each test calls a launch component's own Python function (what KFP runs in the step's container) with the
inputs a pipeline gives it: the dataset and model artifacts, the path of its ``job`` output, the run and
task ids, ``backend="kubernetes"``. The step finds the cluster as it would outside a pod, through the
kubeconfig that ``KUBECONFIG`` names; the cluster is the fake API server (tests/fake_k8s) and a simulated
operator plays the job. Nothing is configured for the test: the backend runs with its production
:class:`KubernetesConfig`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import kftrain
import kftrain_components
from kftrain.backends.base import load_identity
from kftrain.backends.kubernetes.config import SERVICE_ACCOUNT_NAMESPACE
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
from tests.fake_k8s import FakeKube, JobSim, OperatorSim
from tests.fake_k8s.server import load_crd_schemas

REPO_ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = REPO_ROOT.parent / "shared/reference/crds"
KUBECONFIG_NAMESPACE = "kfp-user"
RUN_ID = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345"
TASK_ID = "9a8b7c6d-0000-1111-2222-333344445555"


@dataclass(frozen=True)
class KindCase:
    component: Any
    kind: str
    plural: str
    replica_key: str
    # The replica the failure scenario fails: the one whose exit ends the job for its operator.
    failing: str
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.kind


KINDS = [
    KindCase(pytorchjob_launch, "PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", "worker-0", {"workers": 1}),
    KindCase(tfjob_launch, "TFJob", "tfjobs", "tfReplicaSpecs", "worker-1", {"workers": 2}),
    KindCase(mpijob_launch, "MPIJob", "mpijobs", "mpiReplicaSpecs", "launcher-0", {"workers": 2}),
]


# -- the cluster, as the step finds it -------------------------------------------------------------


@pytest.fixture
def kubeconfig(kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig whose current context is the fake cluster, named by ``KUBECONFIG``; not in a pod, in KFP."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
                "users": [{"name": "pipeline-runner", "user": {"token": "not-a-secret"}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {"cluster": "fake", "user": "pipeline-runner", "namespace": KUBECONFIG_NAMESPACE},
                    }
                ],
                "current-context": "fake",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: no in-cluster configuration
    monkeypatch.setenv("KFP_POD_NAME", "launch-step-a")
    monkeypatch.setenv("KFP_POD_UID", "uid-a")
    return path


def expected_namespace() -> str:
    """This pod's namespace when the tests run in one (the backend prefers it), else the kubeconfig's."""
    if SERVICE_ACCOUNT_NAMESPACE.is_file() and SERVICE_ACCOUNT_NAMESPACE.read_text().strip():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return KUBECONFIG_NAMESPACE


def step_inputs(case: KindCase, tmp_path: Path, job_output: str = "job") -> dict[str, Any]:
    """The inputs a pipeline gives the step: artifacts, the ``job`` output path, the run and task ids."""
    return {
        "dataset": SimpleNamespace(uri=str(tmp_path / "dataset"), metadata={}),
        "model": SimpleNamespace(uri=str(tmp_path / "model"), metadata={}),
        "job": str(tmp_path / "outputs" / job_output),
        "run_id": RUN_ID,
        "task_id": TASK_ID,
        "backend": "kubernetes",
        **case.inputs,
    }


def launch(case: KindCase, inputs: dict[str, Any]) -> None:
    case.component.python_func(**inputs)


# -- scenarios -------------------------------------------------------------------------------------


def start(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.start()
    sim.condition("Running")


def write_model(sim: JobSim) -> None:
    """What the trainer does before it exits 0: write the model where the job's env points it."""
    for replica in sim.obj["spec"].values():
        if not isinstance(replica, dict):
            continue
        for spec in replica.values():
            for container in spec["template"]["spec"]["containers"]:
                for env in container.get("env", []):
                    if env["name"] == "KFTRAIN_MODEL_URI":
                        Path(env["value"]).mkdir(parents=True, exist_ok=True)
                        (Path(env["value"]) / "model.bin").write_bytes(b"weights")
                        return


def succeed(sim: JobSim) -> None:
    for label in sim.labels():
        sim.log(label, f"hello from {label}")
    write_model(sim)
    sim.exit_all(0)
    sim.condition("Succeeded")


def s_success(sim: JobSim) -> None:
    start(sim)
    succeed(sim)


def failing(label: str) -> Callable[[JobSim], None]:
    def scenario(sim: JobSim) -> None:
        start(sim)
        sim.log(label, "step 1", "Traceback (most recent call last):", f"RuntimeError: {label} ran out of memory")
        sim.exit(label, 3)
        # cleanPodPolicy Running (the step's default): the operator deletes the pods still running.
        with sim.kube.cond:
            for key, pod in list(sim.kube.pods.items()):
                if pod["metadata"]["name"] in sim.pod_names.values() and pod["status"]["phase"] == "Running":
                    del sim.kube.pods[key]
            sim.kube.bump()
            sim.kube.cond.notify_all()
        sim.condition("Failed", reason=f"{sim.obj['kind']}Failed", message=f"{label} failed with exit code 3")

    return scenario


def s_forever(sim: JobSim) -> None:
    start(sim)
    step = 0
    while True:
        step += 1
        sim.log(sim.labels()[0], f"step {step}")
        sim.sleep(0.05)


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


# -- the step in a process of its own ----------------------------------------------------------------

STEP_SCRIPT = textwrap.dedent(
    """
    import importlib, json, sys
    from types import SimpleNamespace

    module, name, inputs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    component = getattr(importlib.import_module(module), name)
    for artifact in ("dataset", "model"):
        inputs[artifact] = SimpleNamespace(uri=inputs[artifact], metadata={})
    component.python_func(**inputs)
    """
)


def start_step_process(case: KindCase, inputs: dict[str, Any], tmp_path: Path) -> subprocess.Popen[str]:
    """The step's function in its own process (the launcher pod), with this process's environment."""
    script = tmp_path / "step.py"
    script.write_text(STEP_SCRIPT)
    args = {k: (v.uri if isinstance(v, SimpleNamespace) else v) for k, v in inputs.items()}
    imported_from = [str(Path(kftrain.__file__).parents[1]), str(Path(kftrain_components.__file__).parents[1])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*imported_from, os.environ.get("PYTHONPATH", "")])}
    module = case.component.python_func.__module__
    return subprocess.Popen(
        [sys.executable, str(script), module, case.component.python_func.__name__, json.dumps(args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until_waiting(proc: subprocess.Popen[str], identity: Path, operator: OperatorSim) -> None:
    """Until the step has published its job's identity and the job's pods run: the step is in its wait."""
    end = time.monotonic() + 20
    while not (identity.exists() and any(s.pod_names for s in operator.sims)):
        assert proc.poll() is None and time.monotonic() < end, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.05)
    time.sleep(0.5)  # well inside wait(), streaming logs


# -- tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", KINDS, ids=[c.id for c in KINDS])
def test_step_runs_its_job_to_success(
    case: KindCase, kube: FakeKube, operator: OperatorSim, kubeconfig: Path, tmp_path: Path
) -> None:
    operator.scenario = s_success
    inputs = step_inputs(case, tmp_path)
    launch(case, inputs)  # returns: the job succeeded

    (created,) = kube.created
    meta = created["metadata"]
    handle = load_identity(inputs["job"])
    assert handle.name == meta["name"] == job_name_for(RUN_ID, TASK_ID, base=case.kind.lower())
    assert (handle.backend, handle.kind, handle.uid) == ("kubernetes", case.kind, meta["uid"])
    assert handle.namespace == meta["namespace"] == expected_namespace()
    assert meta["labels"][RUN_ID_LABEL] == label_value(RUN_ID)
    assert meta["labels"][TASK_ID_LABEL] == label_value(TASK_ID)
    assert meta["annotations"][RUN_ID_ANNOTATION] == RUN_ID
    assert meta["annotations"][TASK_ID_ANNOTATION] == TASK_ID
    assert [o["uid"] for o in meta["ownerReferences"]] == ["uid-a"]  # the launcher pod, from KFP_POD_UID
    for rspec in created["spec"][case.replica_key].values():
        pod_labels = rspec["template"]["metadata"]["labels"]
        assert (pod_labels[RUN_ID_LABEL], pod_labels[TASK_ID_LABEL]) == (label_value(RUN_ID), label_value(TASK_ID))
    assert load_crd_schemas(CRD_DIR).errors(created) == []
    assert inputs["model"].metadata["job"] == handle.name


@pytest.mark.parametrize("case", KINDS, ids=[c.id for c in KINDS])
def test_failed_job_fails_the_step_with_the_replicas_exit_code_and_log(
    case: KindCase,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    operator.scenario = failing(case.failing)
    with pytest.raises(SystemExit) as ended:
        launch(case, step_inputs(case, tmp_path))
    assert ended.value.code == 3
    stderr = capsys.readouterr().err
    assert f"last 3 log lines of {case.failing}" in stderr, stderr
    assert "Traceback (most recent call last):" in stderr
    assert f"RuntimeError: {case.failing} ran out of memory" in stderr
    assert f"{case.failing} failed with exit code 3" in stderr


@pytest.mark.parametrize("case", KINDS, ids=[c.id for c in KINDS])
def test_relaunched_step_reattaches_to_its_job(
    case: KindCase,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    operator.scenario = s_until_a_second_owner
    first = step_inputs(case, tmp_path, job_output="job-attempt-1")
    proc = start_step_process(case, first, tmp_path)
    try:
        wait_until_waiting(proc, Path(first["job"]), operator)
        proc.kill()  # the launcher pod dies: nothing gets to delete the job
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(kube.jobs_of(case.plural)) == 1

    monkeypatch.setenv("KFP_POD_NAME", "launch-step-b")  # KFP retries the task in a new pod
    monkeypatch.setenv("KFP_POD_UID", "uid-b")
    second = step_inputs(case, tmp_path, job_output="job-attempt-2")
    launch(case, second)  # returns once the job it reattached to succeeds

    assert "reattached to" in capsys.readouterr().out
    assert len(kube.created) == 1
    (job,) = kube.jobs_of(case.plural)
    assert load_identity(second["job"]) == load_identity(first["job"])
    assert load_identity(second["job"]).name == job["metadata"]["name"]
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == ["uid-a", "uid-b"]


@pytest.mark.parametrize("case", KINDS, ids=[c.id for c in KINDS])
def test_sigterm_during_the_wait_deletes_the_job(
    case: KindCase, kube: FakeKube, operator: OperatorSim, kubeconfig: Path, tmp_path: Path
) -> None:
    operator.scenario = s_forever
    inputs = step_inputs(case, tmp_path)
    identity = Path(inputs["job"])
    proc = start_step_process(case, inputs, tmp_path)
    try:
        wait_until_waiting(proc, identity, operator)
        assert kube.jobs_of(case.plural)
        proc.send_signal(signal.SIGTERM)  # the run is cancelled, or the launcher pod evicted
        sent = time.monotonic()
        while kube.jobs_of(case.plural):
            assert time.monotonic() - sent < 10, "job not deleted within 10 s of SIGTERM"
            time.sleep(0.05)
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read() if proc.stdout else ""
    assert rc == 143, output  # the step reports the signal, as a shell would (128 + 15)
    assert f"deleted {case.kind} {expected_namespace()}/{load_identity(identity).name}" in output
    assert [d[2] for d in kube.deletions] == [load_identity(identity).name]


def test_an_elastic_pytorchjob_reaches_the_cluster_with_its_policy_queue_and_scheduling(
    kube: FakeKube, operator: OperatorSim, kubeconfig: Path, tmp_path: Path
) -> None:
    """Fair share across jobs is the scheduler's: the elastic job carries the Kueue queue label and the Volcano
    schedulingPolicy the platform inputs ask for, beside the elasticPolicy the operator scales it within."""
    operator.scenario = s_success
    case = KindCase(
        pytorchjob_launch,
        "PyTorchJob",
        "pytorchjobs",
        "pytorchReplicaSpecs",
        "worker-0",
        {
            "workers": 3,
            "elastic_min_workers": 2,
            "elastic_max_workers": 4,
            "elastic_rdzv_conf": {"last_call_timeout": "30"},
            "queue_name": "team-a",
            "scheduling": {"queue": "volcano-a", "minAvailable": 2},
            "priority_class": "batch-low",
        },
    )
    launch(case, step_inputs(case, tmp_path))

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
    assert pod["containers"][0]["command"] == ["torchrun", "--module", "kftrain.trainers.torch_ddp"]

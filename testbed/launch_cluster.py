"""The launch components on the fake cluster, as a pipeline runs them: each kind's component given typed inputs or
a manifest (:data:`LAUNCHES`), the inputs a pipeline gives the step, what the simulated operator plays, and what
every run must leave (every replica's log kept, no secret anywhere).

The step finds the cluster through the kubeconfig that ``KUBECONFIG`` names, with the backend's production
:class:`KubernetesConfig`; what :data:`LAUNCHES` covers is in the comment below the imports.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from kubernetes import client

import kftrain
import kftrain_components
from kftrain.job.kinds import KINDS
from kftrain.kube_client import SERVICE_ACCOUNT_NAMESPACE
from kftrain.launch.inputs import launch_inputs
from testbed.fake_k8s import FakeKube, JobSim
from testbed.fixtures import CANARY, KUBECONFIG_NAMESPACE
from testbed.launch_harness import SETTINGS
from testbed.manifests import as_yaml, mpijob_v2, pytorchjob, replica, tfjob, trainjob

# :data:`LAUNCHES` covers every kind of :data:`kftrain.job.kinds.KINDS` that has a :data:`CASES` entry (the test data
# only: its inputs, its manifest, the replica that fails it); its component, apiVersion, plural and the inputs its
# component takes are the kind's own (tests/job/kinds/test_every_kind.py fails for a kind without an entry).
#
# The step finds the cluster as it would outside a pod, through the kubeconfig that ``KUBECONFIG`` names (the
# ``kubeconfig`` fixture, testbed/fixtures.py); nothing is configured for the test: the backend runs with its
# production :class:`KubernetesConfig`.


RUN_ID = "4f1c9a6e-2b1d-4c8e-9f00-abcdef012345"


TASK_ID = "9a8b7c6d-0000-1111-2222-333344445555"


IMAGE = "registry.example.com/team/train:1"


TRAIN = ["python", "train.py"]
PYTORCH_MANIFEST = as_yaml(
    pytorchjob({r: replica(1, "pytorch", TRAIN, image=IMAGE) for r in ("Master", "Worker")}, name="ddp")
)
TF_MANIFEST = as_yaml(tfjob({"Worker": replica(2, "tensorflow", TRAIN, image=IMAGE)}, name="mwms"))
MPI_MANIFEST = as_yaml(
    mpijob_v2(
        {
            "Launcher": replica(1, "launcher", ["mpirun", *TRAIN], image=IMAGE),
            "Worker": replica(2, "worker", image=IMAGE),
        },
        name="allreduce",
        slotsPerWorker=1,
    )
)
TRAINJOB_MANIFEST = as_yaml(
    trainjob(name="ddp-v2", trainer={"numNodes": 2, "image": IMAGE, "command": ["torchrun", "train.py"]})
)


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


@dataclass(frozen=True)
class KindCase:
    """What the launch tests give one kind's component and expect of its job: test data, none of the kind's facts."""

    replicas: dict[str, Any]  # the typed launch's replica inputs (beside the image)
    manifest: str  # the manifest launch's manifest
    # The replica the failure scenario fails: the one whose exit ends the job for its operator.
    failing: str
    # The replica type that runs no training (the MPI launcher): no GPU and no /dev/shm.
    not_training: str | None = None
    # Platform inputs its component takes and its step refuses.
    refused: tuple[str, ...] = ()


CASES: dict[str, KindCase] = {
    "TFJob": KindCase({"workers": 2}, TF_MANIFEST, "worker-1"),
    "PyTorchJob": KindCase({"workers": 1}, PYTORCH_MANIFEST, "worker-0"),
    "MPIJob": KindCase({"workers": 2}, MPI_MANIFEST, "launcher-0", not_training="Launcher"),
    # Trainer v2.3.0's pod patch has no priorityClassName (the step refuses it: the runtime sets it).
    "TrainJob": KindCase({"num_nodes": 2}, TRAINJOB_MANIFEST, "node-1", refused=("priority_class",)),
}


def launch_component_of(kind: str) -> Any:
    """The launch component of ``kind``: ``<kind>_launch``, defined in ``components/training/<kind>_launch/``."""
    folder = f"{kind.lower()}_launch"
    return getattr(importlib.import_module(f"kftrain_components.training.{folder}.component"), folder)


def _launches() -> list[Launch]:
    out = []
    for name in KINDS.names():
        case = CASES.get(name)
        if case is None:
            continue
        kind = KINDS.get(name)
        # The platform settings the component has no input for (a TrainJob's run policy is its runtime's: no Volcano
        # scheduling policy, no TTL), and those its step refuses.
        taken = {i.name for i in launch_inputs(kind)}
        not_taken = (*(k for k in SETTINGS if k not in taken), *case.refused)
        component = launch_component_of(name)
        typed = {**case.replicas, "image": IMAGE}
        for source, inputs in (("typed", typed), ("manifest", {"manifest": case.manifest})):
            out.append(
                Launch(
                    component,
                    name,
                    kind.spec.api_version,
                    kind.spec.plural,
                    source,
                    inputs,
                    case.failing,
                    not_training=case.not_training,
                    not_taken=not_taken,
                )
            )
    return out


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

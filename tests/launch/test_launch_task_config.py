"""The launch components' variant for KFP backends >= 2.15: the launch task's own settings (``dsl.TaskConfig``)
reach every replica of the job, below the explicit launch inputs (kftrain/job/pod_settings.py).

Through the component's own function with the TaskConfig KFP's executor builds from what the driver passes
(kfp 2.17.0 ``kfp/dsl/executor.py``: ``TaskConfig(affinity=..., tolerations=..., node_selector=..., env=...,
volumes=..., volume_mounts=..., resources=...)``), and through the KFP backend in the tests (testbed/kfp_backend),
where the driver fills the TaskConfig from the task's settings and applies to the launch pod only what the
component marks ``applyToTask``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl, kubernetes

from kftrain.job.pod_settings import task_config_passthroughs
from kftrain_components.training.mpijob_launch.component import mpijob_launch_task_config
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch_task_config
from testbed.launch_harness import render_launch
from testbed.task_config_cases import AFFINITY, GPU, MOUNT, REFUSED, TAKEN, VOLUME

TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def pods(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each replica type's pod spec."""
    replicas = next(v for k, v in manifest["spec"].items() if k.endswith("ReplicaSpecs"))
    return {rtype: spec["template"]["spec"] for rtype, spec in replicas.items()}


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}


# (field, what the task sets, the explicit inputs beside it, what every replica's pod must then have)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    (
        "RESOURCES",
        {"resources": {"limits": {"cpu": "3", "memory": "2Gi", GPU: 1.0}, "requests": {"cpu": "3"}}},
        {"cpu": "2"},  # the explicit input wins for cpu; the task fills memory and the GPU (a quantity: a string)
        lambda pod: (
            pod["containers"][0]["resources"]
            == {"limits": {"cpu": "2", "memory": "2Gi", GPU: "1"}, "requests": {"cpu": "2"}}
        ),
    ),
    (
        "ENV",
        {"env": [{"name": "TEAM", "value": "vision"}, {"name": "STAGE", "value": "task"}]},
        {"env": {"STAGE": "input"}},
        lambda pod: env_of(pod)["TEAM"] == "vision" and env_of(pod)["STAGE"] == "input",
    ),
    (
        "KUBERNETES_NODE_SELECTOR",
        {"node_selector": {"pool": "gpu", "zone": "a"}},
        {"node_selector": {"pool": "cpu"}},
        lambda pod: pod["nodeSelector"] == {"pool": "cpu", "zone": "a"},
    ),
    (
        "KUBERNETES_TOLERATIONS",
        {"tolerations": [TOLERATION]},
        {},
        lambda pod: pod["tolerations"] == [TOLERATION],
    ),
    ("KUBERNETES_AFFINITY", {"affinity": AFFINITY}, {}, lambda pod: pod["affinity"] == AFFINITY),
    (
        "KUBERNETES_VOLUMES",
        {"volumes": [VOLUME], "volume_mounts": [MOUNT]},
        {},
        lambda pod: VOLUME in pod["volumes"] and MOUNT in pod["containers"][0]["volumeMounts"],
    ),
]


@pytest.mark.parametrize(("field", "task", "inputs", "check"), CASES, ids=[c[0] for c in CASES])
def test_each_task_setting_reaches_every_replica_below_the_explicit_inputs(
    field: str,
    task: dict[str, Any],
    inputs: dict[str, Any],
    check: Callable[[dict[str, Any]], bool],
    monkeypatch,
    tmp_path,
) -> None:
    rendered = render_launch(
        pytorchjob_launch_task_config, monkeypatch, tmp_path, task_config=dsl.TaskConfig(**task), **inputs
    )
    for rtype, pod in pods(rendered.manifest).items():
        assert check(pod), (field, rtype, pod)


def test_without_task_settings_the_variant_renders_what_the_plain_component_does(monkeypatch, tmp_path) -> None:
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch

    plain = render_launch(pytorchjob_launch, monkeypatch, tmp_path).manifest
    empty = render_launch(pytorchjob_launch_task_config, monkeypatch, tmp_path, task_config=dsl.TaskConfig())
    assert empty.manifest == plain


def test_a_task_gpu_never_reaches_an_mpi_launcher_that_only_runs_mpirun(monkeypatch, tmp_path) -> None:
    task = dsl.TaskConfig(resources={"limits": {GPU: 1, "cpu": "1"}})
    rendered = render_launch(mpijob_launch_task_config, monkeypatch, tmp_path, task_config=task, image="hvd:1")
    launcher, worker = pods(rendered.manifest)["Launcher"], pods(rendered.manifest)["Worker"]
    assert launcher["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
    assert worker["containers"][0]["resources"] == {"limits": {GPU: "1", "cpu": "1"}}


def test_malformed_task_settings_are_refused_naming_the_field(monkeypatch, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        render_launch(pytorchjob_launch_task_config, monkeypatch, tmp_path, task_config=dsl.TaskConfig(env=[{"x": 1}]))
    assert ended.value.code == 2
    assert "task_config.env[0]" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["mpijob", "pytorchjob", "tfjob", "trainjob"])
def test_each_compiled_variant_passes_through_what_the_pod_settings_declare(kind: str) -> None:
    compiled = Path(__file__).parents[2] / "components" / "training" / f"{kind}_launch" / "component.task_config.yaml"
    spec = yaml.safe_load(compiled.read_text())
    for passthroughs in (
        spec["root"]["taskConfigPassthroughs"],
        spec["components"][f"comp-{kind}-launch-task-config"]["taskConfigPassthroughs"],
    ):
        assert {p["field"]: p.get("applyToTask", False) for p in passthroughs} == task_config_passthroughs()


@pytest.mark.parametrize("case", REFUSED)
def test_task_settings_go_through_the_checks_of_the_inputs(case: str, monkeypatch, tmp_path, capsys) -> None:
    component, task, inputs, message = REFUSED[case]
    with pytest.raises(SystemExit) as ended:
        render_launch(component, monkeypatch, tmp_path, task_config=dsl.TaskConfig(**task), **inputs)
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    (line,) = err.splitlines()  # one line, no traceback
    assert re.match(re.escape(f"ERROR: {message}").replace(re.escape("[*]"), r"\[\d+\]"), line), line
    assert not (tmp_path / "model").exists()  # nothing ran


@pytest.mark.parametrize("case", TAKEN)
def test_task_settings_kubernetes_accepts_are_taken(case: str, monkeypatch, tmp_path) -> None:
    task, inputs, check = TAKEN[case]
    rendered = render_launch(
        pytorchjob_launch_task_config, monkeypatch, tmp_path, task_config=dsl.TaskConfig(**task), **inputs
    )
    for rtype, pod in pods(rendered.manifest).items():
        assert check(pod), (case, rtype, pod)


# Rank 0 writes a model where the step says, on whatever store that is.
WRITE_MODEL = """
import os
from kftrain import storage
if os.environ["RANK"] == "0":
    with storage.ArtifactWriter(os.environ["KFTRAIN_MODEL_URI"]) as writer, writer.open("model.txt") as out:
        out.write(b"trained")
"""


def task_config_launch() -> Any:
    """Made when the test runs, not at collection: each task setting's call walks the stack (kfp's
    ``inspect.stack()``), a second or more with the suite's modules loaded."""

    @dsl.pipeline(name="task-config-launch")
    def pipeline():
        """A launch task with its own settings, as a pipeline author writes them."""
        task = pytorchjob_launch_task_config(
            image="example.com/train:1",  # a cluster runs every replica from an image
            command=["python", "-c", WRITE_MODEL],
            workers=1,
            storage_secret="mlpipeline-minio-artifact",  # the replicas' credentials for the store
        )
        task.set_cpu_limit("1").set_memory_limit("1Gi").set_accelerator_type(GPU).set_accelerator_limit(1)
        task.set_env_variable("TEAM", "vision")
        kubernetes.add_node_selector(task, label_key="pool", label_value="gpu")
        kubernetes.add_toleration(task, key="gpu", operator="Exists", effect="NoSchedule")
        kubernetes.mount_pvc(task, pvc_name="datasets", mount_path="/data")

    return pipeline


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    from testbed.kfp_backend.cluster import cluster_for
    from testbed.kfp_backend.versions import NEWEST

    yield from cluster_for(NEWEST, tmp_path)


@pytest.mark.slow
def test_a_launch_tasks_settings_reach_the_replicas_on_the_backend(cluster: Any, tmp_path: Path) -> None:
    """KFP 2.17's driver passes the task's settings to the step, applies env, node selector, tolerations and volumes
    to the launch pod too, and never its resources: the GPU is the training replicas' alone."""
    from testbed.kfp_backend.runner import run_pipeline

    package = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(task_config_launch(), str(package))
    run_pipeline(cluster, package, {})
    (job,) = cluster.jobs
    for rtype, pod in pods(job).items():
        container = pod["containers"][0]
        assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi", GPU: "1"}, rtype
        assert env_of(pod)["TEAM"] == "vision" and pod["nodeSelector"]["pool"] == "gpu", rtype
        assert TOLERATION in pod["tolerations"], rtype
        assert {"mountPath": "/data"}.items() <= next(
            m for m in container["volumeMounts"] if m["mountPath"] == "/data"
        ).items()
    (launch_pod,) = [p for (ns, n), p in cluster.kube.pods.items() if "system-container-impl" in n]
    assert GPU not in str(launch_pod["spec"]["containers"][0].get("resources"))
    assert launch_pod["spec"]["nodeSelector"]["pool"] == "gpu"

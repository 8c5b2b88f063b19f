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
from kftrain_components.training.trainjob_launch.component import trainjob_launch_task_config
from testbed.launch_harness import render_launch

GPU = "nvidia.com/gpu"
TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
]}}}  # fmt: skip
VOLUME = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
MOUNT = {"name": "data", "mountPath": "/data"}


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


ON_A_TASK = " (with the launch task's own settings, task_config)"
# A manifest whose Master has its own cpu limit and a volume named "data" (an emptyDir).
OWN_MANIFEST = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: own}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: me/train:1
            command: [python, t.py]
            resources: {limits: {cpu: "1"}}
          volumes: [{name: data, emptyDir: {}}]
"""
NODE_TERMS = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _required_node_affinity(requirement: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": [requirement]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# (component, what the task sets, the explicit inputs beside it, how the one line the step ends with starts: "[*]" any
# index, as the settings beside it place the entry). Each is what the
# same input refuses given explicitly, what the API server or Trainer's webhook refuses of the job it ends in, or a
# task setting that another setting of the job would silently have replaced.
REFUSED: dict[str, tuple[Any, dict[str, Any], dict[str, Any], str]] = {
    # kubeflow/trainer@v2.3.0: pkg/constants/constants.go TorchRunReservedEnvNames, refused by plugins/torch/torch.go
    "a torch runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "PET_NNODES", "value": "3"}]},
        {},
        "spec.trainer.env: must not have reserved envs, invalid envs configured: ['PET_NNODES'] (the torch runtime "
        "sets them)" + ON_A_TASK,
    ),
    # XGBoostReservedEnvNames, refused by plugins/xgboost/xgboost.go
    "an xgboost runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "DMLC_TRACKER_URI", "value": "elsewhere"}]},
        {"runtime": "xgboost-distributed", "command": ["python", "-c", "pass"]},
        "spec.trainer.env[*]: Forbidden: DMLC_TRACKER_URI is reserved for the XGBoost runtime" + ON_A_TASK,
    ),
    # MPIReservedEnvNames, refused by plugins/mpi/mpi.go
    "an MPI runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/tmp/h"}]},
        {"runtime": "deepspeed-distributed"},
        "spec.trainer.env: must not have reserved envs, invalid envs configured: ['OMPI_MCA_orte_default_hostfile'] "
        "(the mpi runtime sets them)" + ON_A_TASK,
    ),
    "the model URI the step sets": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "KFTRAIN_MODEL_URI", "value": "s3://elsewhere/model"}]},
        {},
        "task_config.env[0]: KFTRAIN_MODEL_URI is set by the launch step from the model output's URI; give it there",
    ),
    "an env name the API server refuses": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "1X", "value": "v"}]},
        {},
        "task_config.env[0]: '1X' is not a valid variable name",
    ),
    "an env name set twice": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        {},
        "task_config.env[1]: 'A' is already set by task_config.env[0]",
    ),
    "an env value from two sources": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {}}}]},
        {},
        "task_config.env[0].valueFrom: must name exactly one source",
    ),
    "limits given as a string": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": "4"}},
        {},
        "task_config.resources.limits: expected a mapping, got str",
    ),
    # kubernetes/kubernetes@v1.36.3 pkg/apis/core/validation ValidateContainerResourceRequirements
    "a request above its limit": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}},
        {},
        "task_config.resources.requests.cpu: 2 must be less than or equal to cpu limit of 1",
    ),
    "a request above the job's own limit": (
        pytorchjob_launch_task_config,
        {"resources": {"requests": {"cpu": "2"}}},
        {"manifest": OWN_MANIFEST},
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu: 2 must be less than or "
        "equal to cpu limit of 1" + ON_A_TASK,
    ),
    "a GPU request without its limit": (
        pytorchjob_launch_task_config,
        {"resources": {"requests": {GPU: 1}}},
        {},
        "task_config.resources.limits.nvidia.com/gpu: Limit must be set for non overcommitable resources",
    ),
    "a resource no container has": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": {"gpu": "1"}}},
        {},
        "task_config.resources.limits.gpu: 'gpu' must be a standard resource for containers",
    ),
    "a volume named as the job's, another source": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}], "volume_mounts": [MOUNT]},
        {"manifest": OWN_MANIFEST},
        "task_config.volumes[0].name: 'data' is already a volume of the Master replicas, with another source",
    ),
    "a volume named as an explicit input's": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "pvc-datasets", "emptyDir": {}}]},
        {"pvc_mounts": {"/datasets": "datasets"}},
        "task_config.volumes[0].name: 'pvc-datasets' is already a volume of the Master replicas, with another source",
    ),
    "a volume without a source": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "data"}]},
        {},
        "task_config.volumes[0]: must specify a volume type",
    ),
    # ValidateVolumeMounts: the name must be one of the pod's volumes
    "a mount of a volume the pod lacks": (
        pytorchjob_launch_task_config,
        {"volume_mounts": [{"name": "nope", "mountPath": "/x"}]},
        {},
        "task_config.volume_mounts[0].name: 'nope' is not a volume of the Master replicas' pods",
    ),
    "a relative mount path": (
        pytorchjob_launch_task_config,
        {"volumes": [VOLUME], "volume_mounts": [{"name": "data", "mountPath": "data"}]},
        {},
        "task_config.volume_mounts[0].mountPath: 'data': the mount path must be absolute",
    ),
    "an affinity not a mapping": (
        pytorchjob_launch_task_config,
        {"affinity": {"nodeAffinity": "zone-a"}},
        {},
        "task_config.affinity.nodeAffinity: expected a mapping, got str",
    ),
    "an affinity field misspelt": (
        pytorchjob_launch_task_config,
        {"affinity": {"nodeAfinity": {}}},
        {},
        "task_config.affinity.nodeAfinity: unknown field",
    ),
    "an affinity operator": (
        pytorchjob_launch_task_config,
        {"affinity": _required_node_affinity({"key": "zone", "operator": "Is", "values": ["a"]})},
        {},
        f"task_config.affinity.{NODE_TERMS}[0].matchExpressions[0].operator: 'Is' is not a valid selector operator",
    ),
    "a pod affinity without its topology key": (
        pytorchjob_launch_task_config,
        {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
        {},
        "task_config.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: can not "
        "be empty",
    ),
    "a node selector key": (
        pytorchjob_launch_task_config,
        {"node_selector": {"bad key": "a"}},
        {},
        "task_config.node_selector.bad key: 'bad key' is not a valid label key",
    ),
    "a toleration": (
        pytorchjob_launch_task_config,
        {"tolerations": [{"key": "gpu", "operator": "Maybe"}]},
        {},
        "task_config.tolerations[0].operator: 'Maybe' must be Exists or Equal",
    ),
}


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


# (what the task sets, the explicit inputs beside it, what every replica's pod then has)
TAKEN: dict[str, tuple[dict[str, Any], dict[str, Any], Callable[[dict[str, Any]], bool]]] = {
    "the job's own volume, given again": (
        {"volumes": [{"name": "data", "emptyDir": {}}], "volume_mounts": [{"name": "data", "mountPath": "/data"}]},
        {"manifest": OWN_MANIFEST},
        lambda pod: [v for v in pod["volumes"] if v["name"] == "data"] == [{"name": "data", "emptyDir": {}}],
    ),
    "a variable read from a secret": (
        {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]},
        {},
        lambda pod: (
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
            in pod["containers"][0]["env"]
        ),
    ),
    "a GPU request equal to its limit": (
        {"resources": {"limits": {GPU: 1.0}, "requests": {GPU: "1"}}},
        {},
        lambda pod: pod["containers"][0]["resources"] == {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
    ),
    "an affinity the API server takes": (
        {"affinity": AFFINITY},
        {},
        lambda pod: pod["affinity"] == AFFINITY,
    ),
}


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


@dsl.pipeline(name="task-config-launch")
def task_config_launch():
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
    compiler.Compiler().compile(task_config_launch, str(package))
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

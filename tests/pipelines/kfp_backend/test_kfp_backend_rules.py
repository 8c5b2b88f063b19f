"""The shipped pipelines against each rule of KFP's backend that a cluster applies before a step's code runs.

Every compiled pipeline is checked for every supported release (testbed/kfp_backend/versions.py), with the rules
as testbed/kfp_backend encodes them from kubeflow/pipelines' source (cited there). The rules that need a step to
run are exercised by tests/pipelines/kfp_backend/test_kfp_backend_pipelines.py (slow).
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import REPO_ROOT
from testbed.kfp_backend import protos
from testbed.kfp_backend.driver import DagExecution, DriverError, RunContext, resolve_inputs, resolve_parameter
from testbed.kfp_backend.launcher import LauncherError, upload_outputs
from testbed.kfp_backend.layout import local_path, output_uri, run_root
from testbed.kfp_backend.platform import build_pod, passthrough_options
from testbed.kfp_backend.versions import BACKENDS, NEWEST, OLDEST, Backend

REPO = REPO_ROOT
PIPELINES = sorted(REPO.glob("pipelines/*/*/pipeline.yaml"))
LAUNCH_COMPONENTS = sorted(REPO.glob("components/training/*_launch/component.yaml"))
TASK_CONFIG_LAUNCH_COMPONENTS = sorted(REPO.glob("components/training/*_launch/component.task_config.yaml"))
RUN = RunContext(str(uuid.uuid4()), "run-abcde", "run")


def load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all(path.read_text()))
    platform = next((d for d in docs[1:] if d and "platforms" in d), {})
    return docs[0], platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})


def tasks_of(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(parent DAG component name, task spec, task's component) for every task of every DAG."""
    dags = {"root": spec["root"], **{k: v for k, v in spec["components"].items() if "dag" in v}}
    return [
        (dag_name, task, spec["components"][task["componentRef"]["name"]])
        for dag_name, dag in dags.items()
        for task in dag["dag"]["tasks"].values()
    ]


def parameter_refs(config: Any) -> list[str]:
    """Every componentInputParameter a platform config reads."""
    if isinstance(config, dict):
        found = [config["componentInputParameter"]] if "componentInputParameter" in config else []
        return found + [ref for value in config.values() for ref in parameter_refs(value)]
    if isinstance(config, list):
        return [ref for value in config for ref in parameter_refs(value)]
    return []


@pytest.mark.parametrize("backend", list(BACKENDS.values()), ids=str)
@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.parent.name)
def test_every_platform_config_is_accepted_whole_by_every_release(path: Path, backend: Backend) -> None:
    """2.14+ refuses an unknown field (the run is never created); 2.5 drops it silently: neither may happen."""
    _, executors = load(path)
    for label, config in executors.items():
        protos.parse(backend.kfp_kubernetes, config, strict=True)
        assert protos.dropped_fields(backend.kfp_kubernetes, config) == [], label


def test_secret_env_optional_is_what_2_14_refuses_and_2_5_drops() -> None:
    """The rule the check above relies on, shown on the field the pipelines used to set."""
    config = {
        "secretAsEnv": [
            {
                "keyToEnv": [{"envVar": "AWS_ACCESS_KEY_ID", "secretKey": "accesskey"}],
                "optional": True,
                "secretNameParameter": {"componentInputParameter": "storage_secret"},
            }
        ]
    }
    with pytest.raises(Exception, match="optional"):
        protos.parse(BACKENDS["2.14"].kfp_kubernetes, config, strict=True)
    assert protos.dropped_fields(OLDEST.kfp_kubernetes, config) == ["secretAsEnv.optional"]
    protos.parse(BACKENDS["2.15"].kfp_kubernetes, config, strict=True)


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.parent.name)
def test_platform_parameters_are_inputs_of_every_dag_their_tasks_run_in(path: Path) -> None:
    spec, executors = load(path)
    for dag_name, task, component in tasks_of(spec):
        config = executors.get(component.get("executorLabel", ""), {})
        dag = spec["root"] if dag_name == "root" else spec["components"][dag_name]
        inputs = set(dag.get("inputDefinitions", {}).get("parameters", {}))
        missing = set(parameter_refs(config)) - inputs
        assert not missing, f"{task['taskInfo']['name']} in {dag_name}: parent DAG lacks {sorted(missing)}"


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.parent.name)
def test_no_secret_or_configmap_name_comes_from_a_parameter_that_may_be_empty(path: Path) -> None:
    """The driver refuses an empty name (resolveInputParameterStr); no shipped pipeline gives the driver one."""
    _, executors = load(path)
    for label, config in executors.items():
        for key in ("secretAsEnv", "secretAsVolume", "configMapAsEnv", "configMapAsVolume", "imagePullSecret"):
            for item in config.get(key, []):
                assert not parameter_refs(item), f"{label}.{key}: a name from a run-time parameter"


def platform_dag(**parameters: Any) -> DagExecution:
    return DagExecution(7, "root", {}, parameters, {})


SECRET_FROM_PARAMETER = {
    "secretAsEnv": [
        {
            "keyToEnv": [{"envVar": "AWS_ACCESS_KEY_ID", "secretKey": "accesskey"}],
            "secretNameParameter": {"componentInputParameter": "storage_secret"},
        }
    ]
}


@pytest.mark.parametrize("backend", [OLDEST, NEWEST], ids=str)
def test_an_empty_secret_name_fails_the_driver(backend: Backend) -> None:
    with pytest.raises(DriverError, match="non-empty string"):
        build_pod(SECRET_FROM_PARAMETER, {}, {}, platform_dag(storage_secret=""), "prep", RUN, backend)
    pod = build_pod(SECRET_FROM_PARAMETER, {}, {}, platform_dag(storage_secret="s"), "prep", RUN, backend)
    assert pod.env[0]["valueFrom"]["secretKeyRef"] == {"name": "s", "key": "accesskey"}


@pytest.mark.parametrize(
    "node_selector, tolerations, error",
    [
        ({}, [], None),
        ({"pool": "gpu"}, [{"key": "k", "operator": "Exists"}], None),
        ({"pool": 1}, [], "map of strings"),
        ({}, "none", "struct or list"),
    ],
)
def test_node_selector_and_tolerations_json(node_selector: Any, tolerations: Any, error: str | None) -> None:
    config = {
        "nodeSelector": {"nodeSelectorJson": {"componentInputParameter": "node_selector"}},
        "tolerations": [{"tolerationJson": {"componentInputParameter": "tolerations"}}],
    }
    dag = platform_dag(node_selector=node_selector, tolerations=tolerations)
    if error:
        with pytest.raises(DriverError, match=error):
            build_pod(config, {}, {}, dag, "prep", RUN, OLDEST)
        return
    pod = build_pod(config, {}, {}, dag, "prep", RUN, OLDEST)
    assert (pod.node_selector, pod.tolerations) == (node_selector, tolerations)


def test_only_a_whole_placeholder_is_replaced_and_the_task_uuid_is_the_dags() -> None:
    dag = platform_dag()
    value = {"runtimeValue": {"constant": "{{$.pipeline_task_uuid}}"}}
    assert resolve_parameter(value, dag, "a", RUN) == resolve_parameter(value, dag, "b", RUN) == "7"
    inside = {"runtimeValue": {"constant": "run-{{$.pipeline_job_uuid}}"}}
    assert resolve_parameter(inside, dag, "a", RUN) == "run-{{$.pipeline_job_uuid}}"
    assert resolve_parameter({"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}, dag, "a", RUN) == RUN.run_id


@pytest.mark.parametrize("path", LAUNCH_COMPONENTS, ids=lambda p: p.parent.name)
def test_a_launch_component_runs_as_a_pipeline_without_a_dataset(path: Path) -> None:
    """resolve.go has no optional case for a DAG input artifact: the root must not wire one it may lack."""
    spec, _ = load(path)
    root = spec["root"]
    defaults = {k: v.get("defaultValue") for k, v in root.get("inputDefinitions", {}).get("parameters", {}).items()}
    dag = DagExecution(1, "root", root, {**defaults, "command": ["python", "train.py"]}, {})
    for task in root["dag"]["tasks"].values():
        resolve_inputs(task, spec["components"][task["componentRef"]["name"]], dag, RUN)


def artifact(uri: str, **metadata: Any) -> dict[str, Any]:
    return {"uri": uri, "metadata": metadata, "type": {"schemaTitle": "system.Dataset"}}


@pytest.mark.parametrize(
    "backend, item, downloaded",
    [
        (OLDEST, artifact("minio://b/r/x"), True),
        (OLDEST, artifact("https://example.com/x"), False),  # no local path for the scheme
        (OLDEST, artifact("minio://b/r/x", _kfp_workspace=True), True),  # not a rule at 2.5
        (NEWEST, artifact("minio://b/r/x", _kfp_workspace=True), False),
    ],
    ids=["minio", "other-scheme", "workspace-2.5", "workspace-2.17"],
)
def test_which_inputs_the_launcher_downloads(
    backend: Backend, item: dict[str, Any], downloaded: bool, tmp_path: Path
) -> None:
    from testbed.kfp_backend.launcher import PodFilesystem, download

    class CountingBucket:
        calls: list[str] = []

        def download_prefix(self, uri: str, local: Path, *, siblings_too: bool) -> int:
            self.calls.append(uri)
            return 1

    bucket = CountingBucket()
    assert download(backend, item, bucket, PodFilesystem(tmp_path)) == (1 if downloaded else 0)  # type: ignore[arg-type]


def test_an_output_reported_outside_the_run_bucket_fails_the_upload(tmp_path: Path) -> None:
    """KFTRAIN_ARTIFACT_ROOT moves outputs only where KFP hands out local paths: on the backend the launcher
    refuses a reported URI outside its bucket and prefix (KeyFromURI)."""
    from testbed.kfp_backend.launcher import LaunchRecord, PodFilesystem

    class Root:
        prefixed_bucket = "minio://mlpipeline/v2/artifacts"

        def owns(self, uri: str) -> bool:
            return uri.startswith(self.prefixed_bucket + "/")

    uri = output_uri(run_root(Root.prefixed_bucket, "p", str(uuid.uuid4())), "prep", str(uuid.uuid4()), "dataset")
    given = {"outputs": {"artifacts": {"dataset": {"artifacts": [artifact(uri)]}}}}
    moved = {"artifacts": {"dataset": {"artifacts": [{"uri": "s3://elsewhere/dataset"}]}}}
    with pytest.raises(LauncherError, match="expected bucket prefix"):
        upload_outputs(given, moved, Root(), PodFilesystem(tmp_path), LaunchRecord({}, {}))  # type: ignore[arg-type]
    assert local_path("s3://elsewhere/dataset") == "/s3/elsewhere/dataset"


# -- dsl.TaskConfig (KFP >= 2.15) --------------------------------------------------------------------


def test_task_config_passthrough_takes_a_setting_off_the_pod_unless_applied_to_the_task() -> None:
    component = {
        "taskConfigPassthroughs": [{"field": "RESOURCES"}, {"field": "KUBERNETES_TOLERATIONS", "applyToTask": True}]
    }
    to_task, on_pod = passthrough_options(component)
    assert to_task == {"RESOURCES", "KUBERNETES_TOLERATIONS"}
    assert "RESOURCES" not in on_pod and "KUBERNETES_TOLERATIONS" in on_pod
    container = {"resources": {"accelerator": {"resourceType": "nvidia.com/gpu", "resourceCount": "1"}}}
    config = {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
    pod = build_pod(config, component, container, platform_dag(), "launch", RUN, NEWEST)
    assert pod.resources == {} and pod.task_config["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert pod.tolerations == pod.task_config["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert build_pod(config, component, container, platform_dag(), "launch", RUN, BACKENDS["2.14"]).task_config == {}


PASSTHROUGHS = [
    "RESOURCES",
    "ENV",
    "KUBERNETES_NODE_SELECTOR",
    "KUBERNETES_TOLERATIONS",
    "KUBERNETES_AFFINITY",
    "KUBERNETES_VOLUMES",
]


@pytest.mark.parametrize("field", PASSTHROUGHS)
@pytest.mark.parametrize("path", TASK_CONFIG_LAUNCH_COMPONENTS, ids=lambda p: p.parent.name)
def test_launch_components_pass_the_tasks_settings_to_the_job(path: Path, field: str) -> None:
    """Each setting a pipeline author puts on a launch task is passed to the step for its job (the variant for
    backends >= 2.15), never applied to the launch pod itself but for env, node selector, tolerations and volumes
    (applyToTask): tests/launch/test_launch_task_config.py follows each to the replicas."""
    spec, _ = load(path)
    component = copy.deepcopy(next(iter(c for c in spec["components"].values() if "executorLabel" in c)))
    to_task, on_pod = passthrough_options(component)
    assert field in to_task
    on_the_launch_pod_too = {"ENV", "KUBERNETES_NODE_SELECTOR", "KUBERNETES_TOLERATIONS", "KUBERNETES_VOLUMES"}
    assert (field in on_pod) == (field in on_the_launch_pod_too)

"""The shipped pipelines against each rule of KFP's backend that a cluster applies before a step's code runs.

Every compiled pipeline is checked for every supported release (testbed/kfp_backend/versions.py), with the rules
as testbed/kfp_backend encodes them from kubeflow/pipelines' source (cited there). The rules that need a step to
run are exercised by tests/pipelines/kfp_backend/test_kfp_backend_pipelines.py (slow).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.launch.component import folder_uri
from kftrain.storage import derived_uri
from testbed import REPO_ROOT
from testbed.kfp_backend import protos
from testbed.kfp_backend.cache import cache_key, fingerprint, is_cached
from testbed.kfp_backend.driver import DagExecution, DriverError, RunContext, resolve_inputs, resolve_parameter
from testbed.kfp_backend.launcher import (
    LauncherError,
    LaunchRecord,
    PodFilesystem,
    TaskFiles,
    download,
    executor_output,
    upload_outputs,
)
from testbed.kfp_backend.layout import executor_output_file, output_uri, run_root
from testbed.kfp_backend.platform import build_pod, passthrough_options
from testbed.kfp_backend.runner import PIPELINE_ROOT
from testbed.kfp_backend.session import session_for
from testbed.kfp_backend.store import Bucket
from testbed.kfp_backend.versions import BACKENDS, NEWEST, OLDEST, Backend, release
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer

REPO = REPO_ROOT
PIPELINES = sorted(REPO.glob("pipelines/*/*/pipeline.yaml"))
LAUNCH_COMPONENTS = sorted(REPO.glob("components/training/*_launch/component.yaml"))
TASK_CONFIG_LAUNCH_COMPONENTS = sorted(REPO.glob("components/training/*_launch/component.task_config.yaml"))
RUN = RunContext(str(uuid.uuid4()), "run-abcde", "run")


def load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all(path.read_text()))
    platform: dict[str, Any] = next((d for d in docs[1:] if d and "platforms" in d), {})
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


class CountingBucket:
    """A store that records each download the launcher asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def download_prefix(self, uri: str, local: Path, *, siblings_too: bool) -> int:
        self.calls.append((uri, siblings_too))
        return 1


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
    bucket = CountingBucket()
    assert download(backend, item, bucket, PodFilesystem(tmp_path)) == (1 if downloaded else 0)  # type: ignore[arg-type]


RUN_DIR = run_root(PIPELINE_ROOT, "p", "run-1")
NO_STORE: Any = None  # an upload test's pod wrote no file: the launcher never reaches the store


@pytest.fixture(scope="module")
def model_beside_its_siblings() -> Iterator[tuple[Bucket, str]]:
    """A store holding a launch step's model folder (3 bytes) and what a job leaves beside it, named after it."""
    with MotoServer() as moto:
        bucket = Bucket(PIPELINE_ROOT, moto.endpoint, ACCESS_KEY, SECRET_KEY)
        bucket.create()
        model = output_uri(RUN_DIR, "train", "salt", "model")
        siblings = [derived_uri(model, "checkpoints"), derived_uri(model, "logs"), derived_uri(model, "tensorboard")]
        for uri, body in [(model, b"abc"), *((s, b"sibling") for s in [*siblings, model + ".partial-0a1b"])]:
            bucket.client.put_object(Bucket=bucket.name, Key=bucket.key_of(uri)[1] + "/file", Body=body)
        yield bucket, model


@pytest.mark.parametrize("backend", list(BACKENDS.values()), ids=str)
def test_a_model_recorded_as_its_folder_is_downloaded_alone(
    backend: Backend, model_beside_its_siblings: tuple[Bucket, str], tmp_path: Path
) -> None:
    """Before 2.17 the launcher lists an input's key as a raw prefix: ``.../model`` brings ``model-checkpoints/``,
    ``model-logs/``, ``model-tensorboard/`` and ``model.partial-*`` too; the launch step records ``.../model/``."""
    bucket, model = model_beside_its_siblings
    recorded = folder_uri(model)
    assert recorded == model + "/"
    assert download(backend, artifact(recorded), bucket, PodFilesystem(tmp_path / "folder")) == 3
    provisioned = download(backend, artifact(model), bucket, PodFilesystem(tmp_path / "provisioned"))
    assert provisioned == (3 if backend.at_least("2.17") else 3 + 4 * len(b"sibling"))


@pytest.mark.parametrize(
    "backend, output_file, siblings_too",
    [
        (BACKENDS["2.5"], "/tmp/kfp_outputs/output_metadata.json", True),
        (BACKENDS["2.14"], "/tmp/kfp_outputs/output_metadata.json", True),
        (BACKENDS["2.15"], "/minio/mlpipeline/v2/artifacts/p/run-1/t/salt/output_metadata.json", True),
        (BACKENDS["2.16"], "/minio/mlpipeline/v2/artifacts/p/run-1/t/salt/output_metadata.json", True),
        (BACKENDS["2.17"], "/minio/mlpipeline/v2/artifacts/p/run-1/t/salt/output_metadata.json", False),
    ],
    ids=str,
)
def test_each_release_follows_its_own_rules(
    backend: Backend, output_file: str, siblings_too: bool, tmp_path: Path
) -> None:
    """Releases compare as numbers: 2.5.0 is before 2.15 and 2.17 (as text it sorts after both)."""
    assert executor_output_file(backend, RUN_DIR, "t", "salt") == output_file
    bucket = CountingBucket()
    download(backend, artifact("minio://b/r/model"), bucket, PodFilesystem(tmp_path))  # type: ignore[arg-type]
    assert bucket.calls == [("minio://b/r/model", siblings_too)]


@pytest.mark.parametrize(
    "tag, later",
    [("2.5.0", "2.15"), ("2.5.0", "2.17"), ("2.9.1", "2.14.0"), ("2.16.1", "2.17")],
)
def test_releases_compare_as_numbers(tag: str, later: str) -> None:
    assert release(tag) < release(later)
    backend = Backend("x", tag, "", False, False, False, "")
    assert not backend.at_least(later) and backend.at_least(tag)


@pytest.mark.parametrize(
    "reported, error",
    [
        (output_uri(RUN_DIR, "prep", "salt", "dataset"), None),
        (output_uri(RUN_DIR, "prep", "salt", "model") + "/", None),  # a folder's URI
        (output_uri(run_root(PIPELINE_ROOT, "p", "run-0"), "prep", "salt", "dataset"), "expected bucket prefix"),
        (output_uri(run_root(PIPELINE_ROOT, "q", "run-1"), "prep", "salt", "dataset"), "expected bucket prefix"),
        ("minio://mlpipeline/v2/artifacts/elsewhere", "expected bucket prefix"),
        ("minio://mlpipeline/v2/artifacts/p/run-1", "empty key"),
        ("s3://elsewhere/dataset", "expected bucket prefix"),
        ("https://example.com/dataset", None),  # no local path: recorded, never uploaded
    ],
    ids=["this-run", "this-run-folder", "other-run", "other-pipeline", "root", "run-folder", "other-bucket", "https"],
)
def test_an_output_is_uploaded_only_into_its_runs_folder(reported: str, error: str | None, tmp_path: Path) -> None:
    """The launcher's bucket is the run's folder, not the pipeline root: KFTRAIN_ARTIFACT_ROOT, or a step that
    reports a URI of another run (a cached one's), fails on the backend."""
    given = {"outputs": {"artifacts": {"dataset": {"artifacts": [artifact(output_uri(RUN_DIR, "prep", "s", "d"))]}}}}
    reported_output = {"artifacts": {"dataset": {"artifacts": [{"uri": reported}]}}}

    def upload() -> dict[str, Any]:
        files = TaskFiles(NO_STORE, RUN_DIR, "{}", PodFilesystem(tmp_path))
        return upload_outputs(given, reported_output, files, LaunchRecord({}, {}))

    if error:
        with pytest.raises(LauncherError, match=error):
            upload()
    else:
        assert upload()["dataset"][0]["uri"] == reported


@pytest.mark.parametrize(
    "metadata, later_task_reads",
    [
        ({"framework": "pytorch"}, {"framework": "pytorch"}),
        ({"rows": 1797}, {"rows": 1797.0}),
        ({"ok": True, "bad": False}, {"ok": 1, "bad": 0}),
        ({"classes": [0, 1]}, {"classes": {"list": [0, 1]}}),
        ({"paths": {"triton": "t", "none": None}}, {"paths": {"struct": {"triton": "t", "none": None}}}),
        ({"_kfp_workspace": True}, {}),
        ({"display_name": "mine"}, {"display_name": "mine"}),
    ],
    ids=["string", "number", "booleans", "list", "struct", "workspace-flag", "own-display-name"],
)
def test_artifact_metadata_is_what_mlmd_keeps(
    metadata: dict[str, Any], later_task_reads: dict[str, Any], tmp_path: Path
) -> None:
    kept = recorded_metadata(metadata, tmp_path)
    assert kept == {"display_name": "dataset", "store_session_info": "{}", **later_task_reads}


def test_a_null_metadata_field_fails_the_task(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match=r"unable to produce MLMD artifact for output 'dataset'.*'task'"):
        recorded_metadata({"task": None}, tmp_path)


def recorded_metadata(metadata: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """What a later task reads of output ``dataset`` written with ``metadata``."""
    uri = output_uri(RUN_DIR, "prep", "s", "dataset")
    given = {"outputs": {"artifacts": {"dataset": {"artifacts": [artifact(uri)]}}}}
    written = {"artifacts": {"dataset": {"artifacts": [{"uri": uri, "metadata": metadata}]}}}
    record = LaunchRecord({}, {})
    recorded = upload_outputs(given, written, TaskFiles(NO_STORE, RUN_DIR, "{}", PodFilesystem(tmp_path)), record)
    return dict(recorded["dataset"][0]["metadata"])


def test_the_executor_output_is_json_as_go_reads_it(tmp_path: Path) -> None:
    """Python writes a NaN metric as ``NaN``, which is not JSON: the launcher cannot read the file."""
    path = tmp_path / "output_metadata.json"
    path.write_text(json.dumps({"parameterValues": {"score": float("nan")}}))
    with pytest.raises(LauncherError, match="NaN"):
        executor_output(path)
    path.write_text(json.dumps({"parameterValues": {"score": 0.5}}))
    assert executor_output(path) == {"parameterValues": {"score": 0.5}}


# -- the store a run uses: the kfp-launcher ConfigMap, else the release's default --------------------

SERVICE = {"MINIO_SERVICE_SERVICE_HOST": "10.96.0.10", "MINIO_SERVICE_SERVICE_PORT": "9000"}


@pytest.mark.parametrize(
    "backend, env, endpoint",
    [
        (BACKENDS["2.5"], {}, "minio-service.kubeflow:9000"),
        (BACKENDS["2.5"], SERVICE, "10.96.0.10:9000"),
        (BACKENDS["2.14"], SERVICE, "10.96.0.10:9000"),
        (BACKENDS["2.15"], SERVICE, "minio-service.kubeflow:9000"),  # the constant alone from 2.15
        (BACKENDS["2.16"], SERVICE, "seaweedfs.kubeflow:9000"),
        (BACKENDS["2.17"], {}, "seaweedfs.kubeflow:9000"),
    ],
    ids=["2.5", "2.5-service", "2.14-service", "2.15-service", "2.16-service", "2.17"],
)
def test_a_configmap_without_providers_gives_the_releases_default_store(
    backend: Backend, env: dict[str, str], endpoint: str
) -> None:
    store = session_for(PIPELINE_ROOT, backend, {"defaultPipelineRoot": PIPELINE_ROOT}, env)
    assert (store.endpoint, store.secret_name, store.access_key_key, store.secret_key_key) == (
        endpoint,
        "mlpipeline-minio-artifact",
        "accesskey",
        "secretkey",
    )


def test_configmap_providers_name_the_store() -> None:
    providers = {
        "minio": {
            "default": {
                "endpoint": "store.team-a:9000",
                "disableSSL": True,
                "credentials": {"secretRef": {"secretName": "s", "accessKeyKey": "a", "secretKeyKey": "k"}},
            }
        }
    }
    store = session_for(PIPELINE_ROOT, NEWEST, {"providers": yaml.safe_dump(providers)}, SERVICE)
    assert (store.endpoint, store.secret_name, store.access_key_key, store.secret_key_key) == (
        "store.team-a:9000",
        "s",
        "a",
        "k",
    )


# -- the execution cache -------------------------------------------------------------------------------


def evaluation_input(model_name: str, dataset_uri: str) -> dict[str, Any]:
    model = {"name": model_name, "uri": "minio://b/m", "metadata": {}, "type": {"schemaTitle": "system.Model"}}
    return {
        "inputs": {
            "parameterValues": {"dataset_uri": dataset_uri},
            "artifacts": {"model": {"artifacts": [model]}},
        },
        "outputs": {"artifacts": {}, "parameters": {}},
    }


def test_the_cache_key_holds_a_uri_parameter_as_its_text() -> None:
    """What a URI names is not in the key: the same model over a rewritten dataset replays the old result."""
    container = {"image": "i", "command": ["python"], "args": []}

    def key(model: str, dataset: str) -> str:
        return fingerprint(cache_key(evaluation_input(model, dataset), {}, container))

    assert key("41", "s3://data/eval") == key("41", "s3://data/eval")  # whatever s3://data/eval holds now
    assert key("41", "s3://data/eval") != key("42", "s3://data/eval")
    assert key("41", "s3://data/eval") != key("41", "s3://data/eval-v2")


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.parent.name)
def test_no_task_that_reads_a_uri_parameter_is_cached(path: Path) -> None:
    """A step given a URI (dataset_uri, baseline_model_uri...) reads what is there when it runs; the driver would
    replay an earlier run's result for the same text (testbed/kfp_backend/cache.py). Only a container task is
    looked up (kubeflow/pipelines@2.17.0:backend/src/v2/driver/container.go:173; a DAG task never is)."""
    spec, _ = load(path)
    for dag_name, task, component in tasks_of(spec):
        if "executorLabel" not in component:
            continue
        parameters = component.get("inputDefinitions", {}).get("parameters", {})
        uris = sorted(name for name in parameters if name.endswith("_uri"))
        assert not (uris and is_cached(task)), f"{task['taskInfo']['name']} in {dag_name} is cached and reads {uris}"


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

"""The steps log into a real MLflow tracking server, given the variables KFP 2.17's MLflow plugin gives a task
(testbed/mlflow_server.py, kfp_task_run: the runs laid out and the variables set as the backend does), and
everything is read back through MLflow's own client: the launch step's every point and tags (and a replica's own
``mlflow.log_metric`` in the same run), evaluation's metrics and artifacts, export's tags and its registered
version, and a local pipeline run laid out as KFP lays out a pipeline run's."""

# No `from __future__ import annotations`: KFP reads the test pipeline's parameter types from its annotations.

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from kfp import dsl

from kftrain.tracking.local import tracked_pipeline
from testbed.fixtures import CANARY
from testbed.mlflow_server import kfp_task_run

# A chief that reports five epochs through the metrics contract, logs one metric of its own through MLflow's fluent
# API (MLFLOW_RUN_ID: the task's run) and prints a digest of the token it was given; a worker that does nothing.
PROGRAM = textwrap.dedent(
    """
    import hashlib, json, os
    if os.environ["RANK"] == "0":
        print('KFTRAIN_METRICS_TOTAL {"epoch": 5}', flush=True)
        for epoch in range(1, 6):
            point = {"epoch": epoch, "loss": 1.0 / epoch, "val_accuracy": 0.5 + epoch / 20}
            print("KFTRAIN_METRICS " + json.dumps(point), flush=True)
        import mlflow
        mlflow.log_metric("from_rank0", 42.0, step=5)
        model = os.environ["KFTRAIN_MODEL_URI"]
        os.makedirs(model, exist_ok=True)
        open(os.path.join(model, "weights.txt"), "w").write("w")
        token = os.environ.get("MLFLOW_TRACKING_TOKEN", "").encode()
        print("token digest:", hashlib.sha256(token).hexdigest()[:16], flush=True)
    """
)


@pytest.fixture
def task_env(mlflow_server, monkeypatch):
    """The step's environment as KFP 2.17's driver sets it for a task named ``task``; returns its run id."""

    def make(task: str) -> str:
        env = kfp_task_run(mlflow_server.client(), mlflow_server.uri, task)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return env["MLFLOW_RUN_ID"]

    return make


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_the_launch_step_logs_every_point_and_its_job_and_replicas_log_into_the_same_run(
    mlflow_server, task_env, tmp_path, monkeypatch, capfd
):
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch

    run_id = task_env("pytorchjob-launch")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", CANARY)  # the server takes any token; no log nor manifest may
    model = call_launch(
        pytorchjob_launch, tmp_path, backend="local", command=["python", "-c", PROGRAM], node_selector={"pool": "cpu"}
    )
    client = mlflow_server.client()
    run = client.get_run(run_id)
    # Curves by step start at the first epoch: no final value under a curve's name (KFP logs those at step 0).
    assert history(client, run_id, "curves/loss") == [(e, pytest.approx(1.0 / e)) for e in range(1, 6)]
    assert history(client, run_id, "curves/val_accuracy") == [(e, pytest.approx(0.5 + e / 20)) for e in range(1, 6)]
    assert history(client, run_id, "from_rank0") == [(5, 42.0)]  # the replica's own call, into the task's run
    tags = run.data.tags
    assert tags["kftrain.job.kind"] == "PyTorchJob" and tags["kftrain.job.name"].startswith("pytorchjob-")
    assert tags["kftrain.model_uri"] == model.uri and tags["kftrain.job.outcome"] == "succeeded"
    assert json.loads(tags["kftrain.pods.node_selector"]) == {"pool": "cpu"}
    assert (tags["kftrain.run_id"], tags["kftrain.job.backend"]) == ("run-1", "local")
    # The token reached the chief (by reference, resolved from the step's own environment) and nothing else.
    logs = (tmp_path / "model-logs" / "master-0.log").read_text()
    assert f"token digest: {hashlib.sha256(CANARY.encode()).hexdigest()[:16]}" in logs
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    out, err = capfd.readouterr()
    assert CANARY not in written + out + err + json.dumps(tags)


@pytest.fixture
def without_injection(mlflow_server, monkeypatch, request):
    """KFP's plugin with injectUserEnvVars off (its default): the step has KFP_MLFLOW_CONFIG (the experiment and the
    pipeline's run), no MLFLOW_* variable. Returns a function of a step's name: its one run under the pipeline's."""
    client = mlflow_server.client()
    experiment = client.create_experiment(f"without-injection-{request.node.name}")  # one server per module
    parent = client.create_run(experiment, run_name="pipeline-run").info.run_id
    for name in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    config = {"endpoint": mlflow_server.uri, "experimentId": experiment, "parentRunId": parent}
    monkeypatch.setenv("KFP_MLFLOW_CONFIG", json.dumps(config))

    def step_run(name: str):
        (run,) = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
        assert (run.info.run_name, run.info.status) == (name, "FINISHED")
        return run

    return step_run


def test_without_kfps_variables_a_tracking_uri_input_makes_the_launch_steps_run_and_its_replicas_log_into_it(
    mlflow_server, without_injection, tmp_path
):
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch

    client = mlflow_server.client()
    call_launch(
        pytorchjob_launch,
        tmp_path,
        backend="local",
        command=["python", "-c", PROGRAM],
        mlflow_tracking_uri=mlflow_server.uri,
    )
    run = without_injection("pytorchjob-launch")
    assert history(client, run.info.run_id, "curves/loss") == [(e, pytest.approx(1.0 / e)) for e in range(1, 6)]
    assert history(client, run.info.run_id, "from_rank0") == [(5, 42.0)]  # the replica logged into the step's run
    assert run.data.tags["kftrain.job.kind"] == "PyTorchJob"


def test_a_tracking_uri_input_holding_a_credential_is_refused_before_anything_is_made(tmp_path, capfd):
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch

    with pytest.raises(SystemExit) as ended:
        uri = f"http://user:{CANARY}@127.0.0.1:9"
        call_launch(pytorchjob_launch, tmp_path, backend="local", command=["true"], mlflow_tracking_uri=uri)
    out, err = capfd.readouterr()
    assert ended.value.code == 2 and "ERROR: mlflow_tracking_uri: holds credentials" in err
    assert CANARY not in out + err and not (tmp_path / "model").exists()


STEPS = {  # each evaluation and export component: where it is, and the outputs KFP gives it
    "evaluate_model": ("evaluation.evaluate_model", ("metrics", "classification_metrics", "report", "html_report")),
    "evaluate_language_model": ("evaluation.evaluate_language_model", ("metrics", "report", "html_report")),
    "export_model": ("export.export_model", ("exported", "inference_service")),
    "export_language_model": ("export.export_language_model", ("exported", "inference_service")),
}

OUTPUT_KINDS = {
    "metrics": dsl.Metrics,
    "classification_metrics": dsl.ClassificationMetrics,
    "report": dsl.Markdown,
    "html_report": dsl.HTML,
    "exported": dsl.Model,
    "inference_service": dsl.Artifact,
}


def call_step(name: str, folder: Path, model_uri: str, dataset_uri: str, **inputs):
    """The step component ``name`` called as KFP calls it, its outputs under ``folder``; returns (result, outputs)."""
    import importlib

    where, outputs = STEPS[name]
    component = getattr(importlib.import_module(f"kftrain_components.{where}.component"), name)
    folder.mkdir()
    out = {o: OUTPUT_KINDS[o](name=o, uri=str(folder / o), metadata={}) for o in outputs}
    model = dsl.Model(name="model", uri=model_uri, metadata={})
    return component.python_func(model=model, dataset_uri=dataset_uri, **out, **inputs), out


@pytest.mark.parametrize("name", list(STEPS))
def test_evaluation_and_export_refuse_a_tracking_uri_holding_a_credential_before_anything_is_written(
    name, tmp_path, capfd
):
    (tmp_path / "model").mkdir()
    with pytest.raises(SystemExit) as ended:
        uri = f"https://user:{CANARY}@127.0.0.1:9"
        call_step(name, tmp_path / "out", str(tmp_path / "model"), str(tmp_path / "data"), mlflow_tracking_uri=uri)
    out, err = capfd.readouterr()
    assert ended.value.code == 2 and "ERROR: mlflow_tracking_uri: holds credentials" in err
    assert CANARY not in out + err and not list((tmp_path / "out").iterdir())


def test_without_kfps_variables_evaluation_and_export_log_into_runs_of_their_own_and_register(
    mlflow_server, without_injection, tmp_path, breast_cancer
):
    model_uri, dataset_uri, _ = breast_cancer
    (passed, _), out = call_step(
        "evaluate_model", tmp_path / "evaluate", model_uri, dataset_uri, mlflow_tracking_uri=mlflow_server.uri
    )
    evaluation = without_injection("evaluate-model")
    assert evaluation.data.metrics["accuracy"] == pytest.approx(out["metrics"].metadata["accuracy"], abs=1e-6)
    assert passed and evaluation.data.tags["kftrain.gate.passed"] == "true"
    mlflow_server.client().delete_run(evaluation.info.run_id)  # the next step's run is then the one left
    (version,), out = call_step(
        "export_model",
        tmp_path / "export",
        model_uri,
        dataset_uri,
        targets=["triton"],
        verify_rows=20,
        register_model="cancer-by-input",
        gate_passed=True,
        mlflow_tracking_uri=mlflow_server.uri,
    )
    export = without_injection("export-model")
    assert export.data.tags["kftrain.export.uri"] == out["exported"].uri
    registered = mlflow_server.client().get_model_version("cancer-by-input", version)
    assert registered.run_id == export.info.run_id and registered.tags["kftrain.gate.passed"] == "true"


def test_without_kfps_variables_the_language_models_evaluation_and_export_log_into_runs_of_their_own(
    mlflow_server, without_injection, tmp_path, finetuned_llm
):
    pytest.importorskip("mlflow.transformers", reason="MLflow's transformers flavor (the llm extra: pandas)")
    tracking = {"mlflow_tracking_uri": mlflow_server.uri}
    small = {"max_new_tokens": 3, "max_examples": 2, "compare_base": False, "gate_threshold": 0.0, "batch_size": 2}
    (passed, _), out = call_step("evaluate_language_model", tmp_path / "evaluate", *finetuned_llm, **small, **tracking)
    evaluation = without_injection("evaluate-language-model")
    assert evaluation.data.metrics["perplexity"] == pytest.approx(out["metrics"].metadata["perplexity"], rel=1e-5)
    assert passed and evaluation.data.tags["kftrain.gate.passed"] == "true"
    mlflow_server.client().delete_run(evaluation.info.run_id)
    export_inputs = {"check_prompts": 1, "max_new_tokens": 3, "register_model": "reverse-by-input", **tracking}
    (version,), _ = call_step("export_language_model", tmp_path / "export", *finetuned_llm, **export_inputs)
    export = without_injection("export-language-model")
    registered = mlflow_server.client().get_model_version("reverse-by-input", version)
    assert registered.run_id == export.info.run_id and registered.source == f"runs:/{export.info.run_id}/model"


def test_evaluation_logs_its_scores_verdict_reports_and_curves(mlflow_server, task_env, tmp_path, breast_cancer):
    from kftrain_components.evaluation.evaluate_model.component import evaluate_model

    run_id = task_env("evaluate-model")
    model_uri, dataset_uri, _ = breast_cancer
    kinds = {
        "metrics": dsl.Metrics,
        "classification_metrics": dsl.ClassificationMetrics,
        "report": dsl.Markdown,
        "html_report": dsl.HTML,
    }
    out = {name: kind(name=name, uri=str(tmp_path / name), metadata={}) for name, kind in kinds.items()}
    evaluate_model.python_func(
        model=dsl.Model(name="model", uri=model_uri, metadata={}), dataset_uri=dataset_uri, **out
    )
    client = mlflow_server.client()
    run = client.get_run(run_id)
    assert run.data.metrics["accuracy"] == pytest.approx(out["metrics"].metadata["accuracy"], abs=1e-6)
    assert {"macro_f1", "log_loss", "roc_auc", "pr_auc", "rows"} <= set(run.data.metrics)
    assert run.data.tags["kftrain.gate.passed"] == "true" and run.data.tags["kftrain.gate.metric"] == "accuracy"
    files = {f.path for f in client.list_artifacts(run_id, "evaluation")}
    assert {
        "evaluation/report.html",
        "evaluation/report.md",
        "evaluation/confusion_matrix.json",
        "evaluation/roc_curve.json",
        "evaluation/precision_recall_curve.json",
    } <= files
    folder = Path(client.download_artifacts(run_id, "evaluation", str(tmp_path / "read-back")))
    assert (folder / "report.html").read_text() == Path(out["html_report"].path).read_text()
    confusion = json.loads((folder / "confusion_matrix.json").read_text())
    assert confusion["matrix"] == out["classification_metrics"].metadata["confusionMatrix"]["rows"] or (
        sum(map(sum, confusion["matrix"])) == run.data.metrics["rows"]
    )
    roc = json.loads((folder / "roc_curve.json").read_text())
    assert len(roc["x"]) == len(roc["y"]) > 2


@pytest.mark.parametrize("where", ["s3", "local"])
def test_export_tags_its_layouts_and_registers_a_version_of_the_export(
    where, mlflow_server, task_env, tmp_path, breast_cancer, request
):
    from kftrain_components.export.export_model.component import export_model

    run_id = task_env("export-model")
    model_uri, dataset_uri, _ = breast_cancer
    root = request.getfixturevalue("s3_env") if where == "s3" else str(tmp_path)
    exported = dsl.Model(name="exported", uri=f"{root}/exported", metadata={})
    service = dsl.Artifact(name="inference_service", uri=f"{root}/inference_service", metadata={})
    metrics = dsl.Metrics(name="metrics", uri=str(tmp_path / "metrics"), metadata={"accuracy": 0.97, "rows": 114})
    (version,) = export_model.python_func(
        model=dsl.Model(name="model", uri=model_uri, metadata={}),
        dataset_uri=dataset_uri,
        exported=exported,
        inference_service=service,
        model_name="cancer",
        targets=["triton"],
        verify_rows=20,
        register_model=f"cancer-{where}",
        evaluation_metrics=metrics,
        gate_passed=True,
    )
    client = mlflow_server.client()
    tags = client.get_run(run_id).data.tags
    assert tags["kftrain.export.uri"] == exported.uri
    assert tags["kftrain.export.triton"] == f"{exported.uri}/triton/cancer/1/model.pt"
    assert tags["kftrain.export.served_uri"] == f"{exported.uri}/triton"  # the Triton repository KServe serves
    assert tags["kftrain.export.inference_service"] == service.uri
    registered = client.get_model_version(f"cancer-{where}", version)
    assert registered.run_id == run_id
    assert registered.tags["kftrain.exported_uri"] == exported.uri
    assert registered.tags["evaluation.accuracy"] == "0.97" and registered.tags["kftrain.gate.passed"] == "true"
    assert registered.tags["kfp.pipeline_run_id"] == "pipeline-run-id"  # the pipeline's run's tag (kfp_task_run)
    if where == "s3":
        assert registered.source == exported.uri  # object storage: the export itself
    else:  # a tracking server refuses a local path: the export is logged into the run and registered from there
        assert registered.source == f"runs:/{run_id}/exported"
        names = {f.path for f in client.list_artifacts(run_id, "exported")}
        assert "exported/triton" in names


def test_registering_without_tracking_exports_and_says_it_did_not_register(tmp_path, breast_cancer, caplog):
    from kftrain_components.export.export_model.component import export_model

    model_uri, dataset_uri, _ = breast_cancer
    (version,) = export_model.python_func(
        model=dsl.Model(name="model", uri=model_uri, metadata={}),
        dataset_uri=dataset_uri,
        exported=dsl.Model(name="exported", uri=str(tmp_path / "exported"), metadata={}),
        inference_service=dsl.Artifact(name="s", uri=str(tmp_path / "service"), metadata={}),
        register_model="cancer",
    )
    assert version == "" and (tmp_path / "exported").is_dir()  # the export, which the model is worth, is done
    assert "register_model 'cancer': not registered: registering needs MLflow tracking" in caplog.text


def test_one_bad_point_costs_that_point_only_on_a_real_server(mlflow_server, task_env):
    from kftrain.tracking.client import task_run

    run_id = task_env("pytorchjob-launch")
    with task_run("a test") as run:
        assert run is not None
        run.log_metrics([("loss", 0.5, 1), ("a/../b", 1.0, 1), ("loss", 0.4, int(1e300)), ("loss", 0.3, 2)])
    client = mlflow_server.client()
    assert history(client, run_id, "loss") == [(1, 0.5), (2, 0.3)]


# --- a local pipeline run, laid out as KFP 2.17 lays out a pipeline run's -------------------------------------


@dsl.component(base_image="python:3.11")
def report(value: float, metrics: dsl.Output[dsl.Metrics]) -> str:
    import os

    metrics.log_metric("value", value)
    return os.environ.get("MLFLOW_RUN_ID", "")


@dsl.component(base_image="python:3.11")
def same(run_id: str) -> str:
    import os

    return "yes" if os.environ.get("MLFLOW_RUN_ID") and os.environ["MLFLOW_RUN_ID"] != run_id else "no"


@dsl.pipeline(name="inner")
def inner(run_id: str, go: bool):
    with dsl.If(go == True, name="go"):  # noqa: E712 (a KFP condition)
        same(run_id=run_id)


@dsl.pipeline(name="layout")
def layout(value: float = 0.5):
    first = report(value=value)
    inner(run_id=first.outputs["Output"], go=True)


def test_a_local_run_has_a_parent_run_and_one_nested_run_per_task_as_kfp_lays_them_out(
    mlflow_server, kfp_local, monkeypatch
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "local-layout")
    with tracked_pipeline(kfp_local) as runs:
        layout(value=0.25)
    assert runs is not None
    client = mlflow_server.client()
    experiment = client.get_experiment_by_name("local-layout")
    every = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    parent = every[runs.run_id]
    assert parent.info.status == "FINISHED" and parent.data.tags["kfp.pipeline_run_id"].startswith("layout-")
    assert parent.info.run_name == parent.data.tags["kfp.pipeline_run_id"]
    by_name = {r.info.run_name: r for r in every.values() if r.info.run_id != runs.run_id}
    assert set(by_name) == {"report", "inner", "condition-1", "same"}

    def parent_of(name: str) -> str:
        return by_name[name].data.tags["mlflow.parentRunId"]

    assert parent_of("report") == parent_of("inner") == runs.run_id
    assert parent_of("condition-1") == by_name["inner"].info.run_id
    assert parent_of("same") == by_name["condition-1"].info.run_id
    assert all(r.info.status == "FINISHED" for r in every.values())
    report_run = by_name["report"]
    assert report_run.data.metrics == {"value": 0.25}  # its Metrics output, logged when it ended, as KFP's launcher
    assert report_run.data.params == {"value": "0.25"}  # its input parameters, as JSON
    assert by_name["same"].data.params["run_id"] == json.dumps(report_run.info.run_id)  # the task saw its own run

"""The language-model export step with MLflow tracking on: the run tagged with the export, the model logged with
MLflow's transformers flavor and registered from it; a tracking server that fails leaves the export done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import dsl

from kftrain import storage
from kftrain.steps.export_llm.component import export_llm_component
from testbed.mlflow_server import kfp_task_run


@pytest.fixture
def tracked_run(mlflow_server: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """(client, run id): the task's run on a real tracking server, named to the step as KFP 2.17's driver names it."""
    pytest.importorskip("mlflow.transformers", reason="MLflow's transformers flavor (the llm extra: pandas)")
    client = mlflow_server.client()
    env = kfp_task_run(client, mlflow_server.uri, "task")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return client, env["MLFLOW_RUN_ID"]


def export(folder: Path, model_uri: str, dataset_uri: str, **inputs: Any) -> tuple[str, dsl.Model]:
    exported = dsl.Model(name="exported", uri=str(folder / "exported"), metadata={})
    service = dsl.Artifact(name="inference_service", uri=str(folder / "isvc"), metadata={})
    metrics = dsl.Metrics(name="metrics", uri=str(folder / "metrics"), metadata={"exact_match": 0.9})
    (version,) = export_llm_component(
        model=dsl.Model(name="model", uri=model_uri, metadata={}),
        dataset_uri=dataset_uri,
        exported=exported,
        inference_service=service,
        model_name="rev",
        merge_adapters=inputs.pop("merge_adapters", True),
        check_prompts=1,
        max_new_tokens=4,
        register_model=inputs.pop("register_model", "reverse"),
        evaluation_metrics=metrics,
        gate_passed=True,
    )
    return version, exported


def test_the_merged_model_is_logged_with_the_transformers_flavor_and_registered(tmp_path, finetuned_llm, tracked_run):
    client, run_id = tracked_run
    version, exported = export(tmp_path, *finetuned_llm)
    registered = client.get_model_version("reverse", version)
    assert registered.source == f"runs:/{run_id}/model"
    assert registered.tags["evaluation.exact_match"] == "0.9" and registered.tags["kftrain.gate.passed"] == "true"
    assert registered.tags["kftrain.exported_uri"] == exported.uri
    mlmodel = yaml.safe_load(Path(client.download_artifacts(run_id, "model/MLmodel", str(tmp_path))).read_text())
    flavor = mlmodel["flavors"]["transformers"]
    assert flavor["task"] == "text-generation" and "python_function" in mlmodel["flavors"]
    tags = client.get_run(run_id).data.tags
    assert tags["kftrain.export.huggingface"] == storage.join(exported.uri, "model")
    assert tags["kftrain.export.served_uri"] == str(Path(exported.uri) / "model")


def test_a_kept_adapter_is_registered_as_the_exports_files(tmp_path, finetuned_llm, tracked_run):
    client, run_id = tracked_run
    version, _ = export(tmp_path, *finetuned_llm, merge_adapters=False)
    registered = client.get_model_version("reverse", version)
    assert registered.source == f"runs:/{run_id}/exported"  # the export's files, uploaded: the server takes no path
    assert not client.list_artifacts(run_id, "model")
    assert {a.path for a in client.list_artifacts(run_id, "exported")} >= {"exported/adapter", "exported/model"}


def test_a_failing_flavor_is_a_warning_and_the_export_stays(tmp_path, finetuned_llm, tracked_run, monkeypatch, caplog):
    import mlflow.transformers

    def fails(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no room left")

    monkeypatch.setattr(mlflow.transformers, "save_model", fails)
    version, exported = export(tmp_path, *finetuned_llm, register_model="")
    assert version == ""
    storage.require_complete(exported.uri, verify=True)
    assert "could not be saved with the transformers flavor: no room left" in caplog.text

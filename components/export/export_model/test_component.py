"""export_model writes a model to the layouts model servers load, each reloaded and checked against the model on the
test split before anything is published, and a KServe InferenceService serving it."""

# No `from __future__ import annotations`: KFP reads the pipeline's parameter types from its annotations.

from pathlib import Path

import yaml
from kfp import dsl

from kftrain import storage
from kftrain_components.export.export_model.component import export_model
from testbed import component_calls
from testbed.pipeline_harness import executor_output, step


def export(folder: Path, model_uri: str, dataset_uri: str, **inputs) -> tuple[dsl.Model, dsl.Artifact]:
    return component_calls.export(export_model, folder, model_uri, dataset_uri, **inputs)


def test_a_torchscript_model_to_triton_and_its_inference_service(tmp_path, breast_cancer):
    model_uri, dataset_uri, _ = breast_cancer
    exported, service = export(tmp_path, model_uri, dataset_uri, model_name="bc", targets=["triton"], verify_rows=50)
    storage.require_complete(exported.uri, verify=True)
    assert (Path(exported.uri) / "triton" / "bc" / "config.pbtxt").is_file()
    assert exported.metadata["targets"] == ["triton"] and exported.metadata["source_format"] == "torchscript"
    manifest = yaml.safe_load(Path(service.uri).read_text())
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("InferenceService", "bc")
    assert service.metadata["storageUri"] == manifest["spec"]["predictor"]["model"]["storageUri"]


def test_a_bad_model_name_fails_the_step_before_anything_is_written(tmp_path, breast_cancer, capsys):
    model_uri, dataset_uri, _ = breast_cancer
    bad = {"model_name": "Not_A_Name", "targets": [], "verify_rows": 0}
    component_calls.refused_before_writing(
        lambda: export(tmp_path, model_uri, dataset_uri, **bad), tmp_path, capsys, "model_name"
    )


@dsl.pipeline
def export_imported(model_uri: str, dataset_uri: str):
    """export_model on a model already stored (as an importer hands it over) and a dataset by its URI."""
    model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
    export_model(model=model.output, dataset_uri=dataset_uri, model_name="bc", targets=["triton"], verify_rows=50)


def test_a_local_run_publishes_the_export(kfp_local, breast_cancer):
    model_uri, dataset_uri, _ = breast_cancer
    export_imported(model_uri=model_uri, dataset_uri=dataset_uri)
    (run,) = kfp_local.iterdir()
    ran = step(run, "export-model")
    exported = executor_output(ran)["artifacts"]["exported"]["artifacts"][0]
    storage.require_complete(exported["uri"], verify=True)
    assert exported["metadata"]["targets"] == ["triton"]
    assert "kind: InferenceService" in (ran / "inference_service").read_text()

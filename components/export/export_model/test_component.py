"""export_model writes a model to the layouts model servers load, each reloaded and checked against the model on the
test split before anything is published, and a KServe InferenceService serving it."""

# No `from __future__ import annotations`: KFP reads the pipeline's parameter types from its annotations.

from pathlib import Path

import pytest
import yaml
from kfp import dsl

from kftrain import storage
from kftrain_components.export.export_model.component import export_model
from testbed.pipeline_harness import executor_output, step


def export(folder: Path, model_uri: str, dataset_uri: str, **inputs) -> tuple[dsl.Model, dsl.Artifact]:
    """export_model called as KFP calls it, its outputs ``exported`` and ``isvc`` under ``folder``; returns them."""
    exported = dsl.Model(name="exported", uri=str(folder / "exported"), metadata={})
    service = dsl.Artifact(name="inference_service", uri=str(folder / "isvc"), metadata={})
    model = dsl.Model(name="model", uri=model_uri, metadata={})
    export_model.python_func(
        model=model, dataset_uri=dataset_uri, exported=exported, inference_service=service, **inputs
    )
    return exported, service


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
    with pytest.raises(SystemExit) as ended:
        export(tmp_path, model_uri, dataset_uri, model_name="Not_A_Name", targets=[], verify_rows=0)
    assert ended.value.code == 2
    assert "model_name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


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

"""export_language_model writes a fine-tuned language model for KServe's Hugging Face runtime, reloaded and checked
on the test split's prompts before anything is published, and the InferenceService serving it."""

# No `from __future__ import annotations`: KFP reads the pipeline's parameter types from its annotations.

from pathlib import Path

import pytest
import yaml
from kfp import dsl

from kftrain import storage
from kftrain_components.export.export_language_model.component import export_language_model
from testbed import component_calls
from testbed.pipeline_harness import executor_output, step


def export(folder: Path, model_uri: str, dataset_uri: str, **inputs) -> tuple[dsl.Model, dsl.Artifact]:
    return component_calls.export(export_language_model, folder, model_uri, dataset_uri, **inputs)


def test_a_lora_model_merged_and_its_inference_service(tmp_path, finetuned_llm, capsys):
    exported, service = export(tmp_path, *finetuned_llm, model_name="rev", check_prompts=2, max_new_tokens=4)
    storage.require_complete(exported.uri, verify=True)
    assert (Path(exported.uri) / "model" / "model.safetensors").is_file()
    assert exported.metadata["adapters"] == "merged" and exported.metadata["checked_prompts"] == 2
    assert exported.metadata["generation_config"] == {"max_new_tokens": 4, "do_sample": False, "num_beams": 1}
    manifest = yaml.safe_load(Path(service.uri).read_text())
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("InferenceService", "rev")
    assert manifest["spec"]["predictor"]["model"]["modelFormat"] == {"name": "huggingface"}
    assert service.metadata["storageUri"] == str(Path(exported.uri) / "model")
    assert capsys.readouterr().out.count("export check: 'Reverse: ") == 2


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"model_name": "Not_A_Name"}, "model_name"),
        ({"check_prompts": 0}, "check_prompts"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"register_model": "a/b"}, "register_model"),
    ],
)
def test_a_bad_input_fails_the_step_before_anything_is_written(tmp_path, finetuned_llm, capsys, inputs, named):
    component_calls.refused_before_writing(lambda: export(tmp_path, *finetuned_llm, **inputs), tmp_path, capsys, named)


def test_a_model_folder_without_its_weights_is_one_error(tmp_path, finetuned_llm, capsys):
    broken = tmp_path / "broken"
    storage.copy(finetuned_llm[0], str(broken))
    (broken / "adapter" / "adapter_model.safetensors").unlink()
    (broken / storage.COMPLETE_MARKER).unlink()  # a folder a user's program wrote: no marker to catch it first
    with pytest.raises(SystemExit) as ended:
        export(tmp_path / "out", str(broken), finetuned_llm[1])
    err = capsys.readouterr().err
    assert ended.value.code != 0 and "adapter" in err
    assert not (tmp_path / "out").exists()


@dsl.pipeline
def export_imported(model_uri: str, dataset_uri: str):
    """export_language_model on a model already stored (as an importer hands it over) and a dataset by its URI."""
    model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
    export_language_model(model=model.output, dataset_uri=dataset_uri, model_name="rev", check_prompts=1)


@pytest.mark.slow  # a step process that imports torch, Transformers and PEFT: about 20 s on 2 busy cores
def test_a_local_run_publishes_the_export(kfp_local, finetuned_llm):
    export_imported(model_uri=finetuned_llm[0], dataset_uri=finetuned_llm[1])
    (run,) = kfp_local.iterdir()
    ran = step(run, "export-language-model")
    exported = executor_output(ran)["artifacts"]["exported"]["artifacts"][0]
    storage.require_complete(exported["uri"], verify=True)
    assert exported["metadata"]["format"] == "huggingface"
    assert "modelFormat:\n        name: huggingface" in (ran / "inference_service").read_text()

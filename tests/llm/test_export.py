"""Language-model export: merged or kept adapters, safetensors with the tokenizer and the generation config, checked
by reloading before anything is published, and the InferenceService for KServe's Hugging Face runtime."""

from __future__ import annotations

import json

import pytest
import yaml

from kftrain import storage
from kftrain.errors import ExportError
from kftrain.llm import export as llm_export
from kftrain.llm.export import export_language_model, inference_service
from kftrain.llm.generate import GenerationSettings, generate
from kftrain.llm.model_io import ModelLoadError, load_finetuned, load_model
from testbed import kserve_crd
from testbed.llm_models import examples, write_model

PROMPTS = ["Reverse: abc", "Reverse: hello"]
SETTINGS = GenerationSettings(max_new_tokens=5)


@pytest.fixture(scope="module")
def full_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("full") / "model", examples(8), method="full", steps=10)


def test_a_merged_lora_model_is_safetensors_and_reloads_answering_as_the_model(tmp_path, finetuned_llm):
    out = tmp_path / "out"
    report = export_language_model(finetuned_llm[0], str(out), PROMPTS, model_name="rev", settings=SETTINGS)
    storage.require_complete(str(out), verify=True)
    assert report.merged and not (out / "adapter").exists()
    assert {"model/model.safetensors", "model/config.json", "model/tokenizer.json"} <= set(report.files)
    assert not list(out.rglob("*.bin"))
    config = json.loads((out / "model/generation_config.json").read_text())
    assert (config["max_new_tokens"], config["do_sample"], config["num_beams"]) == (5, False, 1)
    model, tokenizer, _ = load_finetuned(finetuned_llm[0])
    served, served_tokenizer = load_model(str(out / "model"))  # what a server loads: plain weights, no PEFT
    assert type(served).__name__ == "LlamaForCausalLM"
    assert generate(served, served_tokenizer, PROMPTS, SETTINGS) == generate(model, tokenizer, PROMPTS, SETTINGS)
    assert [c["answer"] for c in report.checks] == generate(model, tokenizer, PROMPTS, SETTINGS)
    assert report.max_logit_diff <= llm_export.TOLERANCE
    written = json.loads((out / "export.json").read_text())
    assert (written["adapters"], written["generation_config"]["max_new_tokens"]) == ("merged", 5)
    manifest = yaml.safe_load((out / "kserve/inferenceservice.yaml").read_text())
    assert manifest["spec"]["predictor"]["model"] == {
        "modelFormat": {"name": "huggingface"},
        "storageUri": str(out / "model"),
    }


def test_a_kept_adapter_is_beside_its_base_and_served_by_vllm_lora(tmp_path, finetuned_llm):
    out = tmp_path / "out"
    report = export_language_model(finetuned_llm[0], str(out), PROMPTS, model_name="rev", merge_adapters=False)
    assert not report.merged and "adapter/adapter_model.safetensors" in report.files
    assert "model/model.safetensors" in report.files
    from peft import PeftModel

    base, tokenizer = load_model(str(out / "model"))
    tuned, _, _ = load_finetuned(finetuned_llm[0])
    with tuned.disable_adapter():  # the base in the export is the base, not the merged model
        assert generate(base, tokenizer, PROMPTS, SETTINGS) == generate(tuned, tokenizer, PROMPTS, SETTINGS)
    adapted = PeftModel.from_pretrained(base, str(out / "adapter"))
    assert generate(adapted, tokenizer, PROMPTS, SETTINGS) == generate(tuned, tokenizer, PROMPTS, SETTINGS)
    model = yaml.safe_load((out / "kserve/inferenceservice.yaml").read_text())["spec"]["predictor"]["model"]
    assert model["storageUri"] == str(out)
    assert model["args"] == [
        "--backend=vllm",
        "--model_dir=/mnt/models/model",
        "--enable-lora",
        "--lora-modules=rev-adapter=/mnt/models/adapter",
    ]


def test_a_fully_fine_tuned_model_is_exported_as_it_is(tmp_path, full_model):
    out = tmp_path / "out"
    report = export_language_model(full_model, str(out), PROMPTS, merge_adapters=False)
    assert report.method == "full" and not (out / "adapter").exists()
    assert json.loads((out / "export.json").read_text())["adapters"] == "merged"
    assert report.max_logit_diff == 0.0  # the same weights, reloaded


def test_an_export_that_answers_otherwise_is_not_published(tmp_path, finetuned_llm, monkeypatch):
    other = write_model(tmp_path / "other", examples(6, seed=5), method="full", steps=1)

    def reload_another(folder, keep):
        model, tokenizer, _ = load_finetuned(other)
        return model, tokenizer

    monkeypatch.setattr(llm_export, "_reload", reload_another)
    with pytest.raises(ExportError, match="the reloaded export"):
        export_language_model(finetuned_llm[0], str(tmp_path / "out"), PROMPTS)
    assert not (tmp_path / "out").exists()


def test_a_missing_model_file_is_one_error_and_nothing_is_written(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(ModelLoadError, match=r"kftrain-llm\.json"):
        export_language_model(str(tmp_path / "model"), str(tmp_path / "out"), PROMPTS)
    assert not (tmp_path / "out").exists()


def test_a_bad_model_name_is_refused_before_the_model_is_read(tmp_path):
    with pytest.raises(ExportError, match="model_name 'Rev_1'"):
        export_language_model(str(tmp_path / "nothing"), str(tmp_path / "out"), PROMPTS, model_name="Rev_1")


@pytest.mark.parametrize("keep", [False, True])
def test_the_inference_service_is_valid_against_kserves_crd(keep):
    service, account = inference_service("rev", "s3://bucket/run/exported", keep)
    assert account == {}  # AWS's own S3: no endpoint to name
    written = yaml.safe_load(llm_export.LanguageExport("rev", "lora", not keep, inference_service=service).manifest())
    assert kserve_crd.schemas().errors(written) == []


@pytest.mark.parametrize("field", sorted(kserve_crd.BROKEN_FIELDS))
def test_a_broken_inference_service_is_refused_by_kserves_crd(field):
    service, _ = inference_service("rev", "s3://bucket/run/exported", True)
    errors = kserve_crd.schemas().errors(kserve_crd.broken(service, field))
    assert errors and errors[0].startswith(f"{field}:"), errors


def test_a_minio_export_is_served_from_s3_through_a_service_account(s3_env):
    bucket = s3_env.removeprefix("s3://")
    service, account = inference_service("rev", f"minio://{bucket}/run/exported", False)
    model = service["spec"]["predictor"]
    assert model["model"]["storageUri"] == f"s3://{bucket}/run/exported/model"
    assert model["serviceAccountName"] == account["metadata"]["name"] == "rev-storage"

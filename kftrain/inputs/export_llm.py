"""The ``export_language_model`` component's inputs and outputs: the one table its signature is written from and its
step (:func:`kftrain.steps.export_llm.component.export_llm_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import Output, component_input, rows


@dataclass(frozen=True)
class ExportLanguageModelInputs:
    """What ``export_language_model`` is given: the fine-tuned model, the dataset its export is checked on, the
    outputs it fills, the adapters' fate, the generation config, and the registration in MLflow."""

    model: Any = rows.model(rows.FINETUNED_MODEL)
    dataset_uri: str = rows.dataset_uri(
        "instruction dataset (prepare_instructions' dataset_uri output); the first check_prompts prompts of its "
        "test split check that the reloaded export answers as the fine-tuned model does."
    )
    exported: Any = rows.exported(
        "model/ (safetensors, tokenizer, generation_config.json), adapter/ when kept, export.json, "
        "kserve/inferenceservice.yaml"
    )
    inference_service: Any = rows.inference_service("`exported` with KServe's Hugging Face runtime")
    model_name: str = rows.model_name()
    merge_adapters: bool = component_input(
        True,
        "Merge a LoRA adapter into the weights (served by the Hugging Face runtime on any backend); false: keep it "
        "in adapter/ beside the base in model/ (served by the runtime's vLLM backend as <model_name>-adapter).",
    )
    check_prompts: int = component_input(4, "Prompts of the test split the reloaded export must answer as the model.")
    max_new_tokens: int = rows.max_new_tokens("written as generation_config.json and used by the check")
    register_model: str = rows.register_model()
    evaluation_metrics: Any = rows.evaluation_metrics()
    gate_passed: bool | None = rows.gate_passed()
    mlflow_tracking_uri: str = rows.mlflow_tracking_uri()


OUTPUTS = (Output("model_version", str, 'The registered version ("" when not registered).'),)

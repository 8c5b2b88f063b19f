"""The ``export_language_model`` component's inputs and outputs: the one table its signature is written from and its
step (:func:`kftrain.steps.export_llm.component.export_llm_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.steps.inputs import REQUIRED, Output, artifact, component_input
from kftrain.steps.inputs.evaluate import DATASET_BY_URI
from kftrain.steps.inputs.export import ExportInputs

_REGISTRATION = ExportInputs.__dataclass_fields__  # registering is export_model's: the same inputs, said once


@dataclass(frozen=True)
class ExportLanguageModelInputs:
    """What ``export_language_model`` is given: the fine-tuned model, the dataset its export is checked on, the
    outputs it fills, the adapters' fate, the generation config, and the registration in MLflow."""

    model: Any = artifact(
        "dsl.Input[dsl.Model]",
        "The fine-tuned model: the training program's model folder (kftrain-llm.json, the tokenizer, the weights or "
        "a LoRA adapter).",
    )
    dataset_uri: str = component_input(
        REQUIRED,
        "URI of the instruction dataset (prepare_instructions' dataset_uri output); the first check_prompts prompts "
        f"of its test split check that the reloaded export answers as the fine-tuned model does. {DATASET_BY_URI}",
    )
    exported: Any = artifact(
        "dsl.Output[dsl.Model]",
        "model/ (safetensors, tokenizer, generation_config.json), adapter/ when kept, export.json, "
        "kserve/inferenceservice.yaml.",
    )
    inference_service: Any = artifact(
        "dsl.Output[dsl.Artifact]",
        "A KServe InferenceService (YAML) serving `exported` with KServe's Hugging Face runtime.",
    )
    model_name: str = component_input(
        "model", "Name of the InferenceService and of the served model (a Kubernetes name)."
    )
    merge_adapters: bool = component_input(
        True,
        "Merge a LoRA adapter into the weights (served by the Hugging Face runtime on any backend); false: keep it "
        "in adapter/ beside the base in model/ (served by the runtime's vLLM backend as <model_name>-adapter).",
    )
    check_prompts: int = component_input(4, "Prompts of the test split the reloaded export must answer as the model.")
    max_new_tokens: int = component_input(
        32, "Generation config written as generation_config.json (greedy) and used by the check."
    )
    register_model: str = component_input("", _REGISTRATION["register_model"].metadata["doc"])
    evaluation_metrics: Any = artifact(
        "Optional[dsl.Input[dsl.Metrics]]", _REGISTRATION["evaluation_metrics"].metadata["doc"], default=None
    )
    gate_passed: bool | None = component_input(None, _REGISTRATION["gate_passed"].metadata["doc"])


OUTPUTS = (Output("model_version", str, 'The registered version ("" when not registered).'),)

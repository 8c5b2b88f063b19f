"""Export a fine-tuned language model for KServe's Hugging Face runtime, checked by reloading it first.

A LoRA adapter is merged into the weights (or kept, `merge_adapters`); the weights are safetensors beside the
tokenizer and `generation_config.json`. The written model is reloaded and must answer the first `check_prompts`
prompts of the test split as the fine-tuned model does before anything is published. With MLflow tracking the
model is logged with MLflow's transformers flavor and, given `register_model`, registered.
"""

from kftrain.inputs.export_llm import OUTPUTS, ExportLanguageModelInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import PYTORCH_IMAGE

export_language_model = step_component(
    __name__,
    ExportLanguageModelInputs,
    "kftrain.steps.export_llm.component:export_llm_component",
    outputs=OUTPUTS,
    image=PYTORCH_IMAGE,
)

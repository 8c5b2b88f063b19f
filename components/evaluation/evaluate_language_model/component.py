"""Score a fine-tuned language model on `split` of an instruction dataset, before and after fine-tuning.

Evaluation loss and perplexity over the response tokens, and task metrics (exact_match, prefix_match, contains,
token_f1) of the model's answers to the held-out prompts with a stated generation config (greedy, at most
`max_new_tokens` tokens), for the fine-tuned model and its base. `passed` says whether `gate_metric` meets
`gate_threshold` (and the base model's score): pipelines gate the export on it.
"""

from kftrain.inputs.evaluate_llm import OUTPUTS, EvaluateLanguageModelInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import PYTORCH_IMAGE

evaluate_language_model = step_component(
    __name__,
    EvaluateLanguageModelInputs,
    "kftrain.steps.evaluate_llm.component:evaluate_llm_component",
    outputs=OUTPUTS,
    image=PYTORCH_IMAGE,
)

"""The ``evaluate_language_model`` component's inputs and outputs: the one table its signature is written from and its
step (:func:`kftrain.steps.evaluate_llm.component.evaluate_llm_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import Output, component_input, rows

TASK_METRICS_DOC = (
    "exact_match (the answer is the response), prefix_match (it starts with it), contains (the response is in it) "
    "or token_f1 (F1 of the words)"
)


@dataclass(frozen=True)
class EvaluateLanguageModelInputs:
    """What ``evaluate_language_model`` is given: the fine-tuned model, the instruction dataset, the outputs it
    fills, the task metric, the generation config, the base comparison and the gate."""

    model: Any = rows.model(rows.FINETUNED_MODEL)
    dataset_uri: str = rows.dataset_uri(
        "instruction dataset (prepare_instructions' dataset_uri output: train.jsonl, test.jsonl)."
    )
    metrics: Any = rows.scores(
        "every task metric, eval_loss and perplexity, the base model's as base_<name>, and the generation config "
        "(max_new_tokens, greedy)"
    )
    report: Any = rows.markdown_report("the metrics before and after fine-tuning")
    html_report: Any = rows.html_report(
        "the gate, the metrics before and after, the generation config and sample generations"
    )
    split: str = rows.split()
    task_metric: str = component_input(
        "exact_match", f"The headline task metric of the answers: {TASK_METRICS_DOC}. All are computed."
    )
    max_new_tokens: int = rows.max_new_tokens("decoding is greedy, one beam")
    max_examples: int = component_input(0, "The first this many examples of the split are evaluated (0: all of them).")
    samples: int = component_input(12, "Generations shown in the reports.")
    compare_base: bool = component_input(
        True,
        "Evaluate the base model too (base_model_uri; else a LoRA model with its adapter off; else the base the model "
        "folder holds in base/ or kftrain-llm.json names): the reports compare both, and the gate requires the "
        "fine-tuned model to be no worse.",
    )
    base_model_uri: str = component_input(
        "",
        "The base model to compare with (a Hugging Face model folder); empty: the one the fine-tuned model came from.",
    )
    gate_metric: str = rows.gate_metric(
        "a task metric, eval_loss or perplexity (these two pass at or below the threshold); empty: task_metric."
    )
    gate_threshold: float = rows.gate_threshold(0.8)
    batch_size: int = component_input(16, "Examples scored and answered at a time.")
    mlflow_tracking_uri: str = rows.mlflow_tracking_uri()


OUTPUTS = (
    Output("passed", bool, "Whether the gate metric meets the threshold (and the base model's score)."),
    Output("score", float, "The fine-tuned model's value of the gate metric."),
)

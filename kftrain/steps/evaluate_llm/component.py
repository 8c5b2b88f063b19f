"""The body of the ``evaluate_language_model`` component: score the fine-tuned model (and its base), report into KFP's
artifacts, decide the gate.

Every input is checked (the task and gate metrics, the generation config, the model folder, the split) before
anything is scored or written; a user error ends the step with a one-line message. The base model is
``base_model_uri``, else the fine-tuned one with its LoRA adapter off, else the base the model folder names. It
returns the outputs ``(passed, score)``.
"""

from __future__ import annotations

import logging
import math
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from kftrain.errors import EvaluationError
from kftrain.inputs.evaluate_llm import EvaluateLanguageModelInputs
from kftrain.llm.evaluate import LanguageEvaluation, check_task_metric, evaluate_language_model
from kftrain.llm.generate import GenerationSettings
from kftrain.step import component_step
from kftrain.steps.evaluate import gate
from kftrain.steps.evaluate_llm import report
from kftrain.tracking.client import task_run
from kftrain.tracking.llm import log_language_evaluation

log = logging.getLogger(__name__)


def evaluate_llm_component(**values: Any) -> tuple[bool, float]:
    """Evaluate the fine-tuned model on the split of the instruction dataset (``values``:
    :class:`EvaluateLanguageModelInputs`), fill the KFP artifacts, return the verdict."""
    from kftrain.llm.instructions import read_split
    from kftrain.llm.model_io import load_finetuned

    given = EvaluateLanguageModelInputs(**values)
    with (
        component_step(
            inputs={"model": given.model.uri, "dataset_uri": given.dataset_uri, "base_model_uri": given.base_model_uri}
        ),
        task_run("evaluation's MLflow logging", given.mlflow_tracking_uri, "evaluate-language-model") as tracked,
    ):
        task_metric = check_task_metric(given.task_metric)
        metric = gate.gate_metric(gate.LANGUAGE, given.gate_metric or task_metric)
        settings = GenerationSettings(max_new_tokens=given.max_new_tokens)
        if given.max_examples < 0 or given.samples < 0 or given.batch_size < 1:
            raise EvaluationError("max_examples and samples are 0 or more, batch_size 1 or more")
        examples = read_split(given.dataset_uri, given.split)
        examples = examples[: given.max_examples] if given.max_examples else examples
        model, tokenizer, _ = load_finetuned(given.model.uri)

        def evaluate(m: Any, t: Any) -> LanguageEvaluation:
            return evaluate_language_model(
                m, t, examples, split=given.split, task_metric=task_metric, settings=settings,
                batch_size=given.batch_size,
            )  # fmt: skip

        base = None
        if given.compare_base:
            base_model, base_tokenizer, off = _base(model, tokenizer, given.model.uri, given.base_model_uri)
            with off:
                base = evaluate(base_model, base_tokenizer)
        evaluation = evaluate(model, tokenizer)
        decision = gate.quality_gate(evaluation.metrics, metric, given.gate_threshold, base.metrics if base else None)
        log_kfp_metrics(evaluation, given.metrics, base)
        title = f"Language model evaluation on the {given.split} split"
        markdown = report.markdown_report(evaluation, decision, base, title)
        html = report.html_report(evaluation, decision, base, title, samples=given.samples)
        Path(given.report.path).write_text(markdown, encoding="utf-8")
        Path(given.html_report.path).write_text(html, encoding="utf-8")
        if tracked is not None:
            log_language_evaluation(tracked, evaluation, decision, base=base, markdown=markdown, html=html)
    print(f"quality gate {'passed' if decision.passed else 'FAILED'}: {decision.reason}")
    return decision.passed, decision.score if math.isfinite(decision.score) else 0.0


def _base(model: Any, tokenizer: Any, folder: str, base_uri: str) -> tuple[Any, Any, AbstractContextManager[Any]]:
    """The base model, its tokenizer, and the context it is the base model in: a LoRA model with its adapter off
    (PEFT's ``disable_adapter``), else the model at ``base_uri``, else the base the fine-tuned folder names
    (:func:`kftrain.llm.model_io.load_base`: its ``base/``, or ``kftrain-llm.json``'s ``base_model``)."""
    from kftrain.llm.model_io import load_base, load_model

    if base_uri:
        return (*load_model(base_uri), nullcontext())
    if hasattr(model, "disable_adapter"):
        return model, tokenizer, model.disable_adapter()
    return (*load_base(folder), nullcontext())


def log_kfp_metrics(evaluation: LanguageEvaluation, metrics: Any, base: LanguageEvaluation | None) -> None:
    """Every metric (the base's as ``base_<name>``), the rows and the generation config into KFP's ``Metrics``."""
    for prefix, e in (("", evaluation), ("base_", base)):
        if e is None:
            continue
        for name, value in e.metrics.items():
            if math.isfinite(value):  # KFP's metadata is JSON: no NaN
                metrics.log_metric(f"{prefix}{name}", round(value, 6))
    metrics.log_metric("rows", evaluation.rows)
    metrics.log_metric("response_tokens", evaluation.response_tokens)
    metrics.log_metric("max_new_tokens", evaluation.settings.max_new_tokens)
    metrics.log_metric("greedy", int(not evaluation.settings.do_sample and evaluation.settings.num_beams == 1))

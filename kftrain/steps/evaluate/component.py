"""The body of the ``evaluate_model`` component: score, report into KFP's artifacts, decide the gate.

Every input is checked (the gate's metric against the dataset's task, the model against the dataset) before the
split is read; a user error ends the step with a one-line message. It returns the outputs ``(passed, score)``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from kftrain.data.dataset import read_info
from kftrain.inputs.evaluate import EvaluateInputs
from kftrain.step import component_step
from kftrain.steps.evaluate import gate, reports
from kftrain.steps.evaluate.evaluation import Evaluation, evaluate_model, task_of
from kftrain.steps.evaluate.gate import GateDecision
from kftrain.tracking.client import task_run
from kftrain.tracking.evaluation import log_evaluation

log = logging.getLogger(__name__)
MAX_KFP_CONFUSION = 100  # classes: a larger matrix is too big for KFP's metadata store (the HTML report has it)


def evaluate_component(**values: Any) -> tuple[bool, float]:
    """Evaluate the model on the split of the dataset (``values``: :class:`EvaluateInputs`), fill the KFP artifacts,
    return the verdict."""
    given = EvaluateInputs(**values)
    model, dataset_uri, split, batch_rows = given.model, given.dataset_uri, given.split, given.batch_rows
    baseline_uri = given.baseline_model_uri
    with (
        component_step(inputs={"model": model.uri, "dataset_uri": dataset_uri, "baseline_model_uri": baseline_uri}),
        task_run("evaluation's MLflow logging", given.mlflow_tracking_uri, "evaluate-model") as tracked,
    ):
        metric = gate.gate_metric(task_of(read_info(dataset_uri)), given.gate_metric)
        evaluation = evaluate_model(model.uri, dataset_uri, split, batch_rows=batch_rows)
        baseline = evaluate_model(baseline_uri, dataset_uri, split, batch_rows=batch_rows) if baseline_uri else None
        decision = gate.quality_gate(
            evaluation.metrics, metric, given.gate_threshold, baseline.metrics if baseline else None
        )
        log_kfp_metrics(evaluation, given.metrics, given.classification_metrics, baseline)
        title = f"Evaluation on the {split} split"
        markdown = reports.markdown_report(evaluation, decision, title)
        html = reports.html_report(evaluation, decision, title)
        with open(given.report.path, "w", encoding="utf-8") as handle:
            handle.write(markdown)
        with open(given.html_report.path, "w", encoding="utf-8") as handle:
            handle.write(html)
        if tracked is not None:
            log_evaluation(tracked, evaluation, decision, baseline=baseline, markdown=markdown, html=html)
    print(f"quality gate {'passed' if decision.passed else 'FAILED'}: {decision.reason}")
    return decision.passed, _finite(decision.score)


def log_kfp_metrics(
    evaluation: Evaluation, metrics: Any, classification_metrics: Any, baseline: Evaluation | None
) -> None:
    """Scalars into ``Metrics``; the confusion matrix and ROC/PR points into ``ClassificationMetrics``."""
    for name, value in evaluation.metrics.items():
        if math.isfinite(value):  # KFP's metadata is JSON: no NaN
            metrics.log_metric(name, round(value, 6))
    metrics.log_metric("rows", evaluation.rows)
    if baseline is not None:
        for name, value in baseline.metrics.items():
            if math.isfinite(value):
                metrics.log_metric(f"baseline_{name}", round(value, 6))
    if evaluation.confusion and len(evaluation.classes) <= MAX_KFP_CONFUSION:
        classification_metrics.log_confusion_matrix(evaluation.classes, evaluation.confusion)
    elif evaluation.confusion:
        log.info("%d classes: the confusion matrix is in the HTML report only", len(evaluation.classes))
    if evaluation.confidence_metrics:
        classification_metrics.metadata["confidenceMetrics"] = evaluation.confidence_metrics


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


__all__ = ["GateDecision", "evaluate_component"]

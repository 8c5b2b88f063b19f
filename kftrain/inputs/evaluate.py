"""The ``evaluate_model`` component's inputs and outputs: the one table its signature is written from and its step
(:func:`kftrain.steps.evaluate.component.evaluate_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import Output, artifact, component_input, rows


@dataclass(frozen=True)
class EvaluateInputs:
    """What ``evaluate_model`` is given: the model, the dataset, the outputs it fills, the split and the gate."""

    model: Any = rows.model(rows.TRAINED_MODEL)
    dataset_uri: str = rows.dataset_uri(
        "prepared dataset (a table dataset: prepare_dataset's dataset_uri output); KFP's cache key holds the URI "
        "as text, not what is there: turn caching off for this task (set_caching_options(False)) when the data at "
        "the URI can change."
    )
    metrics: Any = rows.scores("accuracy, macro F1, log loss, ROC AUC, average precision; or MAE, RMSE, R2")
    classification_metrics: Any = artifact(
        "dsl.Output[dsl.ClassificationMetrics]",
        "The confusion matrix and the ROC curve's points (each with its precision).",
    )
    report: Any = rows.markdown_report("the scores, per-class scores and the confusion matrix")
    html_report: Any = rows.html_report(
        "charts of the confusion matrix, ROC and precision-recall curves, residuals, training curves"
    )
    split: str = rows.split()
    gate_metric: str = rows.gate_metric(
        "accuracy, macro_f1, log_loss, roc_auc or pr_auc (classification), mae, rmse or r2 (regression); log_loss, "
        "mae and rmse pass at or below the threshold; empty: accuracy for classification, r2 for regression."
    )
    gate_threshold: float = rows.gate_threshold(0.9)
    baseline_model_uri: str = component_input(
        "", "URI of the model in production (optional); the new one must not be worse on the gate metric."
    )
    batch_rows: int = component_input(65536, "Rows read and scored at a time.")
    mlflow_tracking_uri: str = rows.mlflow_tracking_uri()


OUTPUTS = (
    Output("passed", bool, "Whether the gate metric meets the threshold (and the baseline's score)."),
    Output("score", float, "The new model's value of the gate metric."),
)

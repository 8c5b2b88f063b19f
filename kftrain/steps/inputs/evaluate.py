"""The ``evaluate_model`` component's inputs and outputs: the one table its signature is written from and its step
(:func:`kftrain.steps.evaluate.component.evaluate_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.steps.inputs import REQUIRED, Output, artifact, component_input

DATASET_BY_URI = (
    "It is read by URI, only the split it needs and in batches: as an input artifact, KFP's backend would copy the "
    "whole dataset into the pod before the step starts."
)


@dataclass(frozen=True)
class EvaluateInputs:
    """What ``evaluate_model`` is given: the model, the dataset, the outputs it fills, the split and the gate."""

    model: Any = artifact("dsl.Input[dsl.Model]", "The trained model (a folder following the model contract).")
    dataset_uri: str = component_input(
        REQUIRED,
        "URI of the prepared dataset (a table dataset: prepare_dataset's dataset_uri output). "
        f"{DATASET_BY_URI} KFP's cache key holds the URI as text, not what is there: turn caching off for this "
        "task (set_caching_options(False)) when the data at the URI can change.",
    )
    metrics: Any = artifact(
        "dsl.Output[dsl.Metrics]",
        "Scalar metrics shown in the run's UI (accuracy, macro F1, log loss, ROC AUC, average precision; or MAE, "
        "RMSE, R2).",
    )
    classification_metrics: Any = artifact(
        "dsl.Output[dsl.ClassificationMetrics]",
        "The confusion matrix and the ROC curve's points (each with its precision).",
    )
    report: Any = artifact(
        "dsl.Output[dsl.Markdown]", "A Markdown report: the scores, per-class scores and the confusion matrix."
    )
    html_report: Any = artifact(
        "dsl.Output[dsl.HTML]",
        "An HTML report with charts: confusion matrix, ROC and precision-recall curves, residuals, training curves.",
    )
    split: str = component_input("test", "Split to evaluate on.")
    gate_metric: str = component_input(
        "",
        "Metric the gate checks; empty: accuracy for classification, r2 for regression. Error metrics (log_loss, "
        "mae, rmse) pass at or below the threshold.",
    )
    gate_threshold: float = component_input(0.9, "Value the gate metric must reach.")
    baseline_model_uri: str = component_input(
        "", "URI of the model in production (optional); the new one must not be worse on the gate metric."
    )
    batch_rows: int = component_input(65536, "Rows read and scored at a time.")


OUTPUTS = (
    Output("passed", bool, "Whether the gate metric meets the threshold (and the baseline's score)."),
    Output("score", float, "The new model's value of the gate metric."),
)

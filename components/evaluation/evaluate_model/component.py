"""KFP component: score a model of any accepted format on a held-out split; Metrics, ClassificationMetrics,
Markdown and HTML reports, and the quality gate's verdict."""

from typing import NamedTuple

from kfp import dsl

from kftrain_components.images import PYTORCH_IMAGE


@dsl.component(base_image=PYTORCH_IMAGE, install_kfp_package=False)
def evaluate_model(
    model: dsl.Input[dsl.Model],
    dataset_uri: str,
    metrics: dsl.Output[dsl.Metrics],
    classification_metrics: dsl.Output[dsl.ClassificationMetrics],
    report: dsl.Output[dsl.Markdown],
    html_report: dsl.Output[dsl.HTML],
    split: str = "test",
    gate_metric: str = "",
    gate_threshold: float = 0.9,
    baseline_model_uri: str = "",
    batch_rows: int = 65536,
) -> NamedTuple("Outputs", [("passed", bool), ("score", float)]):
    """Score `model` on `split` of `dataset`: classification (binary or multi-class) or regression, as the dataset says.

    The model is any format of the model contract (TorchScript, ONNX, SavedModel, Keras, kftrain's MLP),
    found from its files. The split is read in batches, so it may be larger than memory. `passed` says
    whether `gate_metric` meets `gate_threshold` (and is not worse than the baseline model's): pipelines
    gate the export on it.

    Args:
        model: The trained model (a folder following the model contract).
        dataset_uri: URI of the prepared dataset (a table dataset: prepare_dataset's dataset_uri output).
            It is read by URI, only the split it needs and in batches: as an input artifact, KFP's backend
            would copy the whole dataset into the pod before the step starts. KFP's cache key holds the
            URI as text, not what is there: turn caching off for this task (set_caching_options(False))
            when the data at the URI can change.
        metrics: Scalar metrics shown in the run's UI (accuracy, macro F1, log loss, ROC AUC, average
            precision; or MAE, RMSE, R2).
        classification_metrics: The confusion matrix and the ROC curve's points (each with its precision).
        report: A Markdown report: the scores, per-class scores and the confusion matrix.
        html_report: An HTML report with charts: confusion matrix, ROC and precision-recall curves,
            residuals, training curves.
        split: Split to evaluate on.
        gate_metric: Metric the gate checks; empty: accuracy for classification, r2 for regression. Error
            metrics (log_loss, mae, rmse) pass at or below the threshold.
        gate_threshold: Value the gate metric must reach.
        baseline_model_uri: URI of the model in production (optional); the new one must not be worse on the
            gate metric.
        batch_rows: Rows read and scored at a time.
    """
    from kftrain.steps.evaluate.component import evaluate_component

    return evaluate_component(
        model=model,
        dataset_uri=dataset_uri,
        metrics=metrics,
        classification_metrics=classification_metrics,
        report=report,
        html_report_output=html_report,
        split=split,
        gate_metric_name=gate_metric,
        gate_threshold=gate_threshold,
        baseline_model_uri=baseline_model_uri,
        batch_rows=batch_rows,
    )

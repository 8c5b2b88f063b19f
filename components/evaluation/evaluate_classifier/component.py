"""KFP component: evaluate a classifier on the held-out split; Metrics, ClassificationMetrics, Markdown."""

from kfp import dsl

from kftrain_components.images import PYTORCH_IMAGE


@dsl.component(base_image=PYTORCH_IMAGE, install_kfp_package=False)
def evaluate_classifier(
    model: dsl.Input[dsl.Model],
    dataset: dsl.Input[dsl.Dataset],
    metrics: dsl.Output[dsl.Metrics],
    classification_metrics: dsl.Output[dsl.ClassificationMetrics],
    report: dsl.Output[dsl.Markdown],
    split: str = "test",
    min_accuracy: float = 0.9,
    baseline_model_uri: str = "",
) -> bool:
    """Score `model` on `split` of `dataset`; returns whether it passes the quality gate.

    It passes when its accuracy reaches `min_accuracy` and, if `baseline_model_uri` is given, is not
    worse than the baseline model's accuracy on the same split.

    The single boolean output drives the pipeline's quality gate (a dsl.If on it), and the scores go
    to the Metrics, ClassificationMetrics and Markdown artifacts shown in the Kubeflow UI.

    Args:
        model: The trained model (any framework kftrain trains).
        dataset: The prepared dataset.
        metrics: Scalar metrics shown in the run's UI (accuracy, macro F1, rows).
        classification_metrics: The confusion matrix, shown in the UI.
        report: A Markdown report with per-class scores.
        split: Split to evaluate on.
        min_accuracy: Accuracy needed to pass.
        baseline_model_uri: URI of the model in production (optional); the new one must not be worse.
    """
    import logging

    from kftrain.steps.evaluate import evaluate_classifier as evaluate
    from kftrain.steps.evaluate import markdown_report, quality_gate

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    result = evaluate(model.uri, dataset.uri, split)
    metrics.log_metric("accuracy", round(result.accuracy, 6))
    metrics.log_metric("macro_f1", round(result.macro_f1, 6))
    metrics.log_metric("rows", result.rows)
    classification_metrics.log_confusion_matrix([str(c) for c in result.classes], result.confusion)
    with open(report.path, "w") as handle:
        handle.write(markdown_report(result, title=f"Evaluation on the {split} split"))
    baseline = evaluate(baseline_model_uri, dataset.uri, split) if baseline_model_uri else None
    if baseline is not None:
        metrics.log_metric("baseline_accuracy", round(baseline.accuracy, 6))
    decision = quality_gate(result, min_accuracy, baseline)
    with open(report.path, "a") as handle:
        handle.write(f"\n**Quality gate: {'passed' if decision.passed else 'failed'}** ({decision.reason})\n")
    print(f"quality gate {'passed' if decision.passed else 'FAILED'}: {decision.reason}")
    return decision.passed

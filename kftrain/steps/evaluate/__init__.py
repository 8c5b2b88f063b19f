"""Evaluation: score a model of any accepted format on a held-out split, report it, and gate its export.

- :mod:`~kftrain.steps.evaluate.scores`: streaming accumulators (confusion matrix, ROC/PR, regression errors);
- :mod:`~kftrain.steps.evaluate.evaluation`: :func:`evaluate_model`, the model on one split, batch by batch;
- :mod:`~kftrain.steps.evaluate.gate`: the quality gate (a metric and a threshold, and an optional baseline);
- :mod:`~kftrain.steps.evaluate.charts`, :mod:`~kftrain.steps.evaluate.reports`: the Markdown and HTML reports;
- :mod:`~kftrain.steps.evaluate.component`: the body of the ``evaluate_model`` component.
"""

from kftrain.errors import EvaluationError
from kftrain.steps.evaluate.evaluation import Evaluation, evaluate_model
from kftrain.steps.evaluate.gate import GateDecision, gate_metric, quality_gate
from kftrain.steps.evaluate.reports import html_report, markdown_report

__all__ = [
    "Evaluation",
    "EvaluationError",
    "GateDecision",
    "evaluate_model",
    "gate_metric",
    "html_report",
    "markdown_report",
    "quality_gate",
]

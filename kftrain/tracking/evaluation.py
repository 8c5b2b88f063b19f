"""What evaluation logs into its task's MLflow run (each request best-effort: :mod:`kftrain.tracking.client`).

- metrics: every score and ``rows`` (a baseline's as ``baseline_<name>``), the names of the KFP Metrics output;
- tags ``kftrain.gate.*``: the metric, its score, whether it passed, and why;
- artifacts under ``evaluation/``: ``report.html``, ``report.md``, ``confusion_matrix.json`` (rows: the true
  class), ``per_class.json``, ``roc_curve.json`` and ``precision_recall_curve.json`` (``x``, ``y``,
  ``thresholds``) for a binary classifier, ``residuals.json`` (prediction, truth) for a regressor.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kftrain.tracking.client import TaskRun

FOLDER = "evaluation"


def log_evaluation(
    run: TaskRun,
    evaluation: Any,
    decision: Any,
    *,
    baseline: Any = None,
    markdown: str = "",
    html: str = "",
) -> None:
    """Log ``evaluation`` (a :class:`kftrain.steps.evaluate.Evaluation`) and the gate's ``decision``."""
    scores = {name: value for name, value in evaluation.metrics.items() if math.isfinite(value)}
    scores["rows"] = float(evaluation.rows)
    if baseline is not None:
        scores.update({f"baseline_{k}": v for k, v in baseline.metrics.items() if math.isfinite(v)})
    tags = {"kftrain.evaluation.task": evaluation.task, "kftrain.evaluation.model_format": evaluation.model_format}
    log_verdict(run, scores, {"kftrain.evaluation.split": evaluation.split, **tags}, decision, markdown, html)
    if evaluation.confusion:
        run.log_json({"classes": evaluation.classes, "matrix": evaluation.confusion}, f"{FOLDER}/confusion_matrix.json")
    if evaluation.per_class:
        run.log_json(evaluation.per_class, f"{FOLDER}/per_class.json")
    for curve, name in ((evaluation.roc, "roc_curve"), (evaluation.precision_recall, "precision_recall_curve")):
        if curve is not None:
            run.log_json(_finite(dataclasses.asdict(curve)), f"{FOLDER}/{name}.json")
    if evaluation.residual_sample:
        run.log_json([list(pair) for pair in evaluation.residual_sample], f"{FOLDER}/residuals.json")


def _finite(data: Any) -> Any:
    """``data`` with every NaN or infinity (a curve's end threshold) as None: JSON has no such numbers."""
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_finite(v) for v in data]
    return None if isinstance(data, float) and not math.isfinite(data) else data


def log_verdict(
    run: TaskRun, scores: dict[str, float], tags: dict[str, Any], decision: Any, markdown: str, html: str
) -> None:
    """What every evaluation logs: its ``scores`` (at step 0), its ``tags`` with the step's and the gate's
    ``decision``'s, and its reports under ``evaluation/``."""
    run.log_metrics([(name, value, 0) for name, value in scores.items()])
    run.set_tags(
        {
            "kftrain.step": "evaluate",
            **tags,
            "kftrain.gate.metric": decision.metric,
            "kftrain.gate.score": decision.score,
            "kftrain.gate.passed": str(bool(decision.passed)).lower(),
            "kftrain.gate.reason": decision.reason,
        }
    )
    if html:
        run.log_text(html, f"{FOLDER}/report.html")
    if markdown:
        run.log_text(markdown, f"{FOLDER}/report.md")

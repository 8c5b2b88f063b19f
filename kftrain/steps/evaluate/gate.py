"""The quality gate: whether a model's score on one metric is good enough to export it.

A gate is a metric and a threshold: ``accuracy >= 0.9``, ``roc_auc >= 0.95``, ``r2 >= 0.3``, ``rmse <= 60``
(error metrics pass at or below the threshold); for a language model ``exact_match >= 0.8`` or ``perplexity <= 3``
(:mod:`kftrain.llm.evaluate`). With a baseline (the model in production, or a fine-tuned model's base, scored on the
same split) the new model must also be at least as good.
"""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.errors import EvaluationError

BINARY, MULTICLASS, REGRESSION, LANGUAGE = "binary", "multiclass", "regression", "language"
METRICS = {
    BINARY: ("accuracy", "macro_f1", "log_loss", "roc_auc", "pr_auc"),
    MULTICLASS: ("accuracy", "macro_f1", "log_loss"),
    REGRESSION: ("mae", "rmse", "r2"),
    LANGUAGE: ("exact_match", "prefix_match", "contains", "token_f1", "eval_loss", "perplexity"),
}
DEFAULT_METRIC = {BINARY: "accuracy", MULTICLASS: "accuracy", REGRESSION: "r2", LANGUAGE: "exact_match"}
LOWER_IS_BETTER = {"log_loss", "mae", "rmse", "eval_loss", "perplexity"}


@dataclass
class GateDecision:
    passed: bool
    metric: str
    score: float
    reason: str


def gate_metric(task: str, metric: str) -> str:
    """The metric a gate uses for ``task`` (the task's default when ``metric`` is empty); checked by name."""
    metric = metric or DEFAULT_METRIC[task]
    if metric not in METRICS[task]:
        raise EvaluationError(
            f"gate_metric: {metric!r} is not a {task} metric (choose from {', '.join(METRICS[task])})"
        )
    return metric


def quality_gate(
    metrics: dict[str, float], metric: str, threshold: float, baseline: dict[str, float] | None = None
) -> GateDecision:
    """Pass when ``metrics[metric]`` meets ``threshold`` and, given a baseline's metrics, is not worse than it."""
    score = metrics[metric]
    lower = metric in LOWER_IS_BETTER
    sign = "<=" if lower else ">="

    def meets(value: float, bar: float) -> bool:
        return value <= bar if lower else value >= bar

    if score != score:  # NaN: e.g. an AUC of a split with one class only
        return GateDecision(False, metric, score, f"{metric} is undefined on this split")
    if not meets(score, threshold):
        return GateDecision(False, metric, score, f"{metric} {score:.4f} fails {sign} {threshold}")
    if baseline is None:
        return GateDecision(True, metric, score, f"{metric} {score:.4f} {sign} {threshold}")
    if not meets(score, baseline[metric]):
        return GateDecision(
            False, metric, score, f"{metric} {score:.4f} is worse than the baseline's {baseline[metric]:.4f}"
        )
    return GateDecision(
        True, metric, score, f"{metric} {score:.4f} {sign} {threshold} and {sign} baseline {baseline[metric]:.4f}"
    )

"""Evaluation: accuracy, confusion matrix and per-class scores of a classifier on a held-out split."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kftrain.extras import requires

with requires("data", "evaluation"):
    import numpy as np

from kftrain.data.dataset import load_split
from kftrain.models import load_predictor

log = logging.getLogger(__name__)


@dataclass
class EvalReport:
    split: str
    rows: int
    accuracy: float
    classes: list[int]
    confusion: list[list[int]]
    per_class: dict[str, dict[str, float]] = field(default_factory=dict)
    framework: str = ""

    @property
    def macro_f1(self) -> float:
        return float(np.mean([c["f1"] for c in self.per_class.values()])) if self.per_class else float("nan")


def evaluate_classifier(model_uri: str, dataset_uri: str, split: str = "test") -> EvalReport:
    predict, info = load_predictor(model_uri)
    x, y = load_split(dataset_uri, split)
    classes = [int(c) for c in info.get("classes", sorted(set(y.tolist())))]
    pred = np.asarray(predict(x)).argmax(axis=1)
    report = score(y, pred, classes, split)
    report.framework = str(info.get("framework", ""))
    log.info("%s accuracy on %d %s rows: %.4f", report.framework, report.rows, split, report.accuracy)
    return report


def score(y: np.ndarray, pred: np.ndarray, classes: list[int], split: str) -> EvalReport:
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), dtype=np.int64)
    for truth, guess in zip(y.tolist(), pred.tolist(), strict=True):
        confusion[index[truth], index[guess]] += 1
    per_class: dict[str, dict[str, float]] = {}
    for c, i in index.items():
        tp = confusion[i, i]
        precision = tp / confusion[:, i].sum() if confusion[:, i].sum() else 0.0
        recall = tp / confusion[i, :].sum() if confusion[i, :].sum() else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[str(c)] = {
            "precision": float(precision),
            "recall": float(recall),
            "f1": float(f1),
            "support": float(confusion[i, :].sum()),
        }
    accuracy = float(np.trace(confusion) / confusion.sum()) if confusion.sum() else float("nan")
    return EvalReport(
        split=split, rows=len(y), accuracy=accuracy, classes=classes, confusion=confusion.tolist(), per_class=per_class
    )


def markdown_report(report: EvalReport, title: str = "Evaluation") -> str:
    lines = [
        f"# {title}",
        "",
        f"- split: `{report.split}` ({report.rows} rows)",
        f"- framework: `{report.framework}`",
        f"- **accuracy: {report.accuracy:.4f}**",
        f"- macro F1: {report.macro_f1:.4f}",
        "",
        "| class | precision | recall | f1 | support |",
        "|---|---|---|---|---|",
    ]
    for c, m in report.per_class.items():
        lines.append(f"| {c} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {int(m['support'])} |")
    lines += ["", "Confusion matrix (rows: truth, columns: prediction):", "", "```"]
    width = max(len(str(v)) for row in report.confusion for v in row) + 1
    lines.append(" " * 4 + "".join(str(c).rjust(width) for c in report.classes))
    for label, row in zip(report.classes, report.confusion, strict=True):
        lines.append(str(label).rjust(3) + " " + "".join(str(v).rjust(width) for v in row))
    lines.append("```")
    return "\n".join(lines) + "\n"


@dataclass
class GateDecision:
    passed: bool
    reason: str


def quality_gate(report: EvalReport, min_accuracy: float, baseline: EvalReport | None = None) -> GateDecision:
    """Export only a model that reaches ``min_accuracy`` and is not worse than the baseline on the same split."""
    if report.accuracy < min_accuracy:
        return GateDecision(False, f"accuracy {report.accuracy:.4f} < min_accuracy {min_accuracy}")
    if baseline is not None:
        if baseline.split != report.split or baseline.rows != report.rows:
            return GateDecision(False, "the baseline was scored on a different split")
        if report.accuracy < baseline.accuracy:
            return GateDecision(False, f"accuracy {report.accuracy:.4f} < baseline accuracy {baseline.accuracy:.4f}")
        return GateDecision(
            True, f"accuracy {report.accuracy:.4f} >= {min_accuracy} and >= baseline {baseline.accuracy:.4f}"
        )
    return GateDecision(True, f"accuracy {report.accuracy:.4f} >= min_accuracy {min_accuracy}")

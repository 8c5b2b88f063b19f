"""Scores, the Markdown report, and the quality gate that decides whether a model is exported."""

from __future__ import annotations

import numpy as np
import pytest

from kftrain.steps.evaluate import EvalReport, markdown_report, quality_gate, score


def report(accuracy: float, split: str = "test", rows: int = 100) -> EvalReport:
    return EvalReport(split=split, rows=rows, accuracy=accuracy, classes=[0, 1], confusion=[[1, 0], [0, 1]])


def test_score_counts_the_confusion_matrix_and_per_class_f1():
    y = np.array([0, 0, 1, 1, 2, 2])
    pred = np.array([0, 1, 1, 1, 2, 0])
    r = score(y, pred, [0, 1, 2], "test")
    assert r.confusion == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    assert r.accuracy == pytest.approx(4 / 6)
    assert r.per_class["1"]["precision"] == pytest.approx(2 / 3)
    assert r.per_class["2"]["recall"] == pytest.approx(1 / 2)
    text = markdown_report(r)
    assert "**accuracy: 0.6667**" in text and "| 1 | 0.667 | 1.000 | 0.800 | 2 |" in text


@pytest.mark.parametrize(
    ("new", "minimum", "baseline", "passed", "reason"),
    [
        (0.95, 0.90, None, True, "accuracy 0.9500 >= min_accuracy 0.9"),
        (0.85, 0.90, None, False, "accuracy 0.8500 < min_accuracy 0.9"),
        (0.95, 0.90, report(0.94), True, "accuracy 0.9500 >= 0.9 and >= baseline 0.9400"),
        (0.95, 0.90, report(0.95), True, "accuracy 0.9500 >= 0.9 and >= baseline 0.9500"),
        (0.95, 0.90, report(0.97), False, "accuracy 0.9500 < baseline accuracy 0.9700"),
        (0.85, 0.90, report(0.80), False, "accuracy 0.8500 < min_accuracy 0.9"),
        (0.95, 0.90, report(0.90, split="validation"), False, "the baseline was scored on a different split"),
        (0.95, 0.90, report(0.90, rows=99), False, "the baseline was scored on a different split"),
    ],
)
def test_quality_gate(new, minimum, baseline, passed, reason):
    decision = quality_gate(report(new), minimum, baseline)
    assert (decision.passed, decision.reason) == (passed, reason)

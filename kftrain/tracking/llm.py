"""What the language-model steps log into their task's MLflow run (each request best-effort:
:mod:`kftrain.tracking.client`).

Evaluation: every metric (the base model's as ``base_<name>``), tags ``kftrain.gate.*`` and
``kftrain.evaluation.*`` (split, task metric, the generation config), and under ``evaluation/`` the reports and
``generations.json`` (prompt, response, answer, score; the base's answer beside).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kftrain.tracking.client import TaskRun
from kftrain.tracking.evaluation import FOLDER


def log_language_evaluation(
    run: TaskRun, evaluation: Any, decision: Any, *, base: Any = None, markdown: str = "", html: str = ""
) -> None:
    """Log ``evaluation`` (a :class:`kftrain.llm.evaluate.LanguageEvaluation`), its base's and the gate's
    ``decision``."""
    scores = {name: value for name, value in evaluation.metrics.items() if math.isfinite(value)}
    scores["rows"] = float(evaluation.rows)
    if base is not None:
        scores.update({f"base_{k}": v for k, v in base.metrics.items() if math.isfinite(v)})
    run.log_metrics([(name, value, 0) for name, value in scores.items()])
    run.set_tags(
        {
            "kftrain.step": "evaluate",
            "kftrain.evaluation.split": evaluation.split,
            "kftrain.evaluation.task": "language",
            "kftrain.evaluation.task_metric": evaluation.task_metric,
            "kftrain.evaluation.generation": evaluation.settings.as_dict(),
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
    rows = [dataclasses.asdict(g) for g in evaluation.generations]
    if base is not None:
        for row, before in zip(rows, base.generations, strict=False):
            row["base_answer"] = before.answer
    run.log_json(rows, f"{FOLDER}/generations.json")

"""The evaluation's reports: Markdown (the KFP Markdown artifact) and a self-contained HTML page with charts.

The HTML page is what a person opens: the gate's verdict and the headline scores first, then for a
classifier the coloured confusion matrix and per-class scores, for a binary one the ROC and precision-recall
curves, for a regressor the residual plot and predicted-vs-actual, and the training curves when the model
folder has a ``metrics.jsonl``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from html import escape

from kftrain.models.history import x_axis
from kftrain.steps.evaluate import charts
from kftrain.steps.evaluate.evaluation import Evaluation
from kftrain.steps.evaluate.gate import GateDecision

PREFIXES = ("train_", "training_", "val_", "validation_", "eval_", "test_")
MAX_TABLE_CLASSES = 50  # per-class tables and the Markdown matrix beyond this many classes go to the HTML chart


def _fmt(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"


def markdown_report(evaluation: Evaluation, decision: GateDecision | None = None, title: str = "Evaluation") -> str:
    e = evaluation
    lines = [
        f"# {title}",
        "",
        f"- model: `{e.model_format}` ({e.framework}), task: {e.task}",
        f"- split: `{e.split}` ({e.rows} rows)",
    ]
    if decision is not None:
        lines.append(f"- **quality gate: {'passed' if decision.passed else 'failed'}** ({decision.reason})")
    lines += ["", "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {_fmt(value)} |" for name, value in e.metrics.items()]
    if e.per_class and len(e.classes) <= MAX_TABLE_CLASSES:
        lines += ["", "| class | precision | recall | f1 | support |", "|---|---|---|---|---|"]
        for label, m in zip(e.classes, e.per_class, strict=True):
            lines.append(
                f"| {label} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {int(m['support'])} |"
            )
        lines += ["", "Confusion matrix (rows: truth, columns: prediction):", "", "```"]
        width = max(len(str(v)) for row in e.confusion for v in row) + 1
        name_width = max(len(c) for c in e.classes)
        lines.append(" " * (name_width + 1) + "".join(c[:width].rjust(width + 1) for c in e.classes))
        for label, row in zip(e.classes, e.confusion, strict=True):
            lines.append(label.rjust(name_width) + " " + "".join(str(v).rjust(width + 1) for v in row))
        lines.append("```")
    return "\n".join(lines) + "\n"


STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 0; background: #f6f7f9; color: #1d2733; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { margin: 0 0 4px; font-size: 24px; } h2 { font-size: 17px; margin: 28px 0 10px; }
.sub { color: #5b6673; margin: 0 0 16px; }
.gate { display: inline-block; padding: 8px 14px; border-radius: 6px; font-weight: 600; margin-bottom: 16px; }
.gate.passed { background: #e3f5e8; color: #17642f; border: 1px solid #9fd8b0; }
.gate.failed { background: #fde8e8; color: #8a1c1c; border: 1px solid #f1a9a9; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: #fff; border: 1px solid #dde2e8; border-radius: 8px; padding: 10px 16px; min-width: 110px; }
.card .name { color: #5b6673; font-size: 12px; } .card .value { font-size: 22px; font-weight: 600; }
.card.gated { border-color: #4a78c2; box-shadow: 0 0 0 1px #4a78c2; }
.row { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.figure { background: #fff; border: 1px solid #dde2e8; border-radius: 8px; }
table { border-collapse: collapse; background: #fff; font-size: 13px; }
th, td { border: 1px solid #dde2e8; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
""".strip()


def html_report(evaluation: Evaluation, decision: GateDecision | None = None, title: str = "Evaluation") -> str:
    """A self-contained HTML page (inline CSS and SVG, no script) showing the evaluation."""
    e = evaluation
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(e.model_format)} model ({escape(e.framework)}), {escape(e.task)} task, '
        f"{e.rows} rows of the <code>{escape(e.split)}</code> split</p>",
    ]
    if decision is not None:
        verdict = "passed" if decision.passed else "failed"
        parts.append(f'<div id="gate" class="gate {verdict}">Quality gate {verdict}: {escape(decision.reason)}</div>')
    parts.append('<section id="scores" class="cards">')
    for name, value in e.metrics.items():
        gated = " gated" if decision is not None and decision.metric == name else ""
        parts.append(
            f'<div class="card{gated}"><div class="name">{escape(name)}</div>'
            f'<div class="value">{_fmt(value)}</div></div>'
        )
    parts.append("</section>")
    if e.confusion:
        parts += [
            '<section id="confusion"><h2>Confusion matrix</h2>',
            '<p class="sub">Rows are the true class, columns the prediction; a cell\'s colour is its share of the '
            "row (the class's recall on the diagonal).</p>",
            '<div class="row">',
            charts.matrix_chart("confusion-matrix", "Confusion matrix", e.confusion, e.classes),
        ]
        if len(e.classes) <= MAX_TABLE_CLASSES:
            parts.append(_per_class_table(e))
        parts.append("</div></section>")
    if e.roc is not None and e.roc.x:
        auc, ap = e.metrics.get("roc_auc", float("nan")), e.metrics.get("pr_auc", float("nan"))
        parts += [
            '<section id="curves"><h2>ROC and precision-recall</h2><div class="row">',
            charts.line_chart(
                "roc-curve",
                f"ROC curve (AUC {_fmt(auc)})",
                [("model", e.roc.x, e.roc.y)],
                "false positive rate",
                "true positive rate",
                x_range=(0, 1),
                y_range=(0, 1.02),
                diagonal=True,
            ),
        ]
        if e.precision_recall is not None and e.precision_recall.x:
            pr = e.precision_recall
            parts.append(
                charts.line_chart(
                    "pr-curve",
                    f"Precision-recall (average precision {_fmt(ap)})",
                    [("model", pr.x, pr.y)],
                    "recall",
                    "precision",
                    x_range=(0, 1),
                    y_range=(0, 1.02),
                )
            )
        parts.append("</div></section>")
    if e.residual_sample:
        residuals = [(p, t - p) for p, t in e.residual_sample]
        parts += [
            '<section id="residuals"><h2>Residuals</h2><div class="row">',
            charts.scatter_chart(
                "residual-plot", "Residuals (truth − prediction)", residuals, "prediction", "residual", reference="zero"
            ),
            charts.scatter_chart(
                "predicted-vs-actual",
                "Prediction vs truth",
                e.residual_sample,
                "prediction",
                "truth",
                reference="identity",
            ),
            f'</div><p class="sub">{len(residuals)} rows sampled uniformly from the split.</p></section>',
        ]
    if e.history:
        parts += [
            '<section id="training"><h2>Training curves</h2><div class="row">',
            *training_charts(e),
            "</div>",
            "</section>",
        ]
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _per_class_table(e: Evaluation) -> str:
    rows = "".join(
        f"<tr><td>{escape(label)}</td><td>{m['precision']:.3f}</td><td>{m['recall']:.3f}</td><td>{m['f1']:.3f}</td>"
        f"<td>{int(m['support'])}</td></tr>"
        for label, m in zip(e.classes, e.per_class, strict=True)
    )
    head = "<tr><th>class</th><th>precision</th><th>recall</th><th>f1</th><th>support</th></tr>"
    return f'<table id="per-class">{head}{rows}</table>'


def training_charts(e: Evaluation) -> list[str]:
    """One chart per metric of ``metrics.jsonl``; ``loss`` and ``val_loss`` share theirs."""
    axis = x_axis(e.history)
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for point in e.history:
        for key in point:
            if key in ("epoch", "step"):
                continue
            base = next((key[len(p) :] for p in PREFIXES if key.startswith(p)), key)
            if key not in groups.setdefault(base, []):
                groups[base].append(key)
    out = []
    for base, keys in groups.items():
        series = []
        for key in keys:
            points = [(p.get(axis, i + 1) if axis else i + 1, p[key]) for i, p in enumerate(e.history) if key in p]
            series.append((key, [x for x, _ in points], [y for _, y in points]))
        fig_id = "training-" + re.sub(r"[^A-Za-z0-9_-]", "-", base)
        out.append(charts.line_chart(fig_id, base, series, axis or "record", base))
    return out

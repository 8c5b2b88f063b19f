"""The language-model evaluation's reports: Markdown (the metrics before and after fine-tuning) and a self-contained
HTML page (the gate, the metrics before and after, the generation config, sample generations).

Prompts, responses and answers are the data's and the model's text: every one reaches the page through
``html.escape`` (a generation is any text, markup included), and none reaches the Markdown report.
"""

from __future__ import annotations

from html import escape

from kftrain.llm.evaluate import LanguageEvaluation
from kftrain.steps.evaluate.gate import LOWER_IS_BETTER, GateDecision
from kftrain.steps.evaluate.reports import STYLE

SAMPLE_STYLE = """
table.samples td { text-align: left; vertical-align: top; white-space: pre-wrap; font-family: ui-monospace, monospace; }
td.hit { background: #e3f5e8; } td.miss { background: #fde8e8; }
""".strip()


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.4f}"


def _change(name: str, after: float, before: float | None) -> str:
    """``after - before``, marked better or worse for the metric's direction."""
    if before is None or after != after or before != before:
        return ""
    delta = after - before
    better = delta < 0 if name in LOWER_IS_BETTER else delta > 0
    return f"{delta:+.4f}" + (" (better)" if better else " (worse)" if delta else "")


def _rows(e: LanguageEvaluation, base: LanguageEvaluation | None) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, value in e.metrics.items():
        before = base.metrics.get(name) if base else None
        rows.append((name, _fmt(before), _fmt(value), _change(name, value, before)))
    return rows


def _config(e: LanguageEvaluation) -> str:
    s = e.settings
    return f"greedy (do_sample={s.do_sample}, num_beams={s.num_beams}), max_new_tokens={s.max_new_tokens}"


def markdown_report(
    e: LanguageEvaluation, decision: GateDecision, base: LanguageEvaluation | None = None, title: str = "Evaluation"
) -> str:
    lines = [
        f"# {title}",
        "",
        f"- split: `{e.split}` ({e.rows} examples, {e.response_tokens} response tokens)",
        f"- generation: {_config(e)}",
        f"- **quality gate: {'passed' if decision.passed else 'failed'}** ({decision.reason})",
        "",
        "| metric | base | fine-tuned | change |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {before} | {after} | {change} |" for name, before, after, change in _rows(e, base)]
    return "\n".join(lines) + "\n"


def html_report(
    e: LanguageEvaluation,
    decision: GateDecision,
    base: LanguageEvaluation | None = None,
    title: str = "Evaluation",
    samples: int = 12,
) -> str:
    """A self-contained HTML page (inline CSS, no script); every text of the data or the model escaped."""
    verdict = "passed" if decision.passed else "failed"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}\n{SAMPLE_STYLE}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{e.rows} examples of the <code>{escape(e.split)}</code> split, {e.response_tokens} response '
        f'tokens; generation: <span id="generation-config">{escape(_config(e))}</span></p>',
        f'<div id="gate" class="gate {verdict}">Quality gate {verdict}: {escape(decision.reason)}</div>',
        '<section id="scores" class="cards">',
    ]
    for name, value in e.metrics.items():
        gated = " gated" if decision.metric == name else ""
        parts.append(
            f'<div class="card{gated}"><div class="name">{escape(name)}</div>'
            f'<div class="value">{_fmt(value)}</div></div>'
        )
    parts.append("</section>")
    head = "<tr><th>metric</th><th>base</th><th>fine-tuned</th><th>change</th></tr>"
    body = "".join(
        f"<tr><td>{escape(n)}</td><td>{b}</td><td>{a}</td><td>{c}</td></tr>" for n, b, a, c in _rows(e, base)
    )
    parts.append(f'<section id="comparison"><h2>Before and after fine-tuning</h2><table>{head}{body}</table></section>')
    parts.append(_samples(e, base, samples))
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _samples(e: LanguageEvaluation, base: LanguageEvaluation | None, count: int) -> str:
    shown = e.generations[:count]
    head = "<tr><th>prompt</th><th>expected</th>" + ("<th>base</th>" if base else "") + "<th>fine-tuned</th></tr>"
    rows = []
    for i, g in enumerate(shown):
        before = ""
        if base is not None and i < len(base.generations):
            b = base.generations[i]
            before = f'<td class="{"hit" if b.score >= 1 else "miss"}">{escape(b.answer)}</td>'
        rows.append(
            f"<tr><td>{escape(g.prompt)}</td><td>{escape(g.response)}</td>{before}"
            f'<td class="{"hit" if g.score >= 1 else "miss"}">{escape(g.answer)}</td></tr>'
        )
    return (
        f'<section id="samples"><h2>Sample generations</h2><p class="sub">The first {len(shown)} of {e.rows}; '
        f"a cell is green where {escape(e.task_metric)} scores it 1.</p>"
        f'<table class="samples">{head}{"".join(rows)}</table></section>'
    )

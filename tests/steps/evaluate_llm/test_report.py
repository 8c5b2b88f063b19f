"""The language-model reports: before and after, the generation config, and sample generations escaped whatever
the data or the model wrote."""

from __future__ import annotations

from html.parser import HTMLParser

from kftrain.llm.evaluate import Generation, LanguageEvaluation
from kftrain.llm.generate import GenerationSettings
from kftrain.steps.evaluate.gate import quality_gate
from kftrain.steps.evaluate_llm.report import html_report, markdown_report

HOSTILE = '</td></table><script>alert("x")</script><img src=x onerror=alert(1)>&amp; | ```'


class Tags(HTMLParser):
    """Every start tag of a page, and the text inside its cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.cells.append(data)


def evaluation(answer: str, metrics: dict[str, float], prompt: str = "Reverse: abc") -> LanguageEvaluation:
    generations = [Generation(prompt, "cba", answer, float(answer == "cba"))]
    return LanguageEvaluation("test", 1, 4, "exact_match", GenerationSettings(max_new_tokens=7), metrics, generations)


def test_a_hostile_generation_and_prompt_are_text_on_the_page():
    after = evaluation(HOSTILE, {"exact_match": 0.0, "eval_loss": 1.5}, prompt=HOSTILE)
    before = evaluation("<b>bold</b>", {"exact_match": 0.0, "eval_loss": 3.0}, prompt=HOSTILE)
    decision = quality_gate(after.metrics, "eval_loss", 2.0, before.metrics)
    page = html_report(after, decision, before, title="<i>t</i>")
    parsed = Tags()
    parsed.feed(page)
    assert (
        "script" not in parsed.tags and "img" not in parsed.tags and "b" not in parsed.tags and "i" not in parsed.tags
    )
    assert parsed.cells.count(HOSTILE) == 2  # the prompt and the answer, each whole, as text
    assert "<b>bold</b>" in parsed.cells and "<i>t</i>" in parsed.cells
    assert "max_new_tokens=7" in page and "greedy" in page


def test_before_and_after_are_compared_in_each_metrics_direction():
    after = evaluation("cba", {"exact_match": 1.0, "eval_loss": 0.5})
    before = evaluation("x", {"exact_match": 0.0, "eval_loss": 2.0})
    decision = quality_gate(after.metrics, "exact_match", 0.8, before.metrics)
    markdown = markdown_report(after, decision, before)
    assert "| exact_match | 0.0000 | 1.0000 | +1.0000 (better) |" in markdown
    assert "| eval_loss | 2.0000 | 0.5000 | -1.5000 (better) |" in markdown
    assert "quality gate: passed" in markdown and "max_new_tokens=7" in markdown
    assert "Reverse" not in markdown  # the data's text stays out of the Markdown report
    page = html_report(after, decision, before)
    assert '<td class="hit">cba</td>' in page and '<td class="miss">x</td>' in page


def test_without_a_base_the_report_has_no_base_column():
    after = evaluation("cba", {"exact_match": 1.0})
    page = html_report(after, quality_gate(after.metrics, "exact_match", 0.5), None)
    assert "<th>base</th>" not in page.split('id="samples"')[1]
    assert "| exact_match | n/a | 1.0000 |  |" in markdown_report(
        after, quality_gate(after.metrics, "exact_match", 0.5)
    )

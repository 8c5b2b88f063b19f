"""The metrics contract: lines a program prints, collected per replica into a progress line, final values, an
HTML page of curves (rendered by headless Chromium) and TensorBoard event files (read by TensorFlow's reader)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kftrain import metrics
from kftrain.metrics.collect import Collector
from kftrain.metrics.html import render
from kftrain.metrics.tensorboard import crc32c, scalar_events


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_report_writes_one_line_that_parses_back() -> None:
    out = io.StringIO()
    metrics.write_line({"epoch": 3.0, "loss": 0.5, "name": "x", "flag": True, "bad": float("nan")}, stream=out)
    metrics.write_line({"epoch": 20}, total=True, stream=out)
    first, second = out.getvalue().splitlines()
    assert first == 'KFTRAIN_METRICS {"epoch":3,"loss":0.5}'
    assert metrics.parse_line(first) == ("point", {"epoch": 3.0, "loss": 0.5})
    assert metrics.parse_line(second) == ("total", {"epoch": 20.0})


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ('2026-01-01 INFO KFTRAIN_METRICS {"step": 5, "acc": 0.9}', ("point", {"step": 5.0, "acc": 0.9})),
        ("KFTRAIN_METRICS not json", None),
        ('KFTRAIN_METRICS ["a list"]', None),
        ('KFTRAIN_METRICSX {"loss": 1}', None),
        ('KFTRAIN_METRICS {"name": "only text"}', None),
        ("an ordinary log line", None),
    ],
)
def test_parse_line(line: str, parsed: object) -> None:
    assert metrics.parse_line(line) == parsed


def test_progress_line_is_bounded_in_rate_and_shows_position_rate_and_eta() -> None:
    said: list[str] = []
    clock = Clock()
    collector = Collector(said.append, every_s=5.0, clock=clock)
    collector.feed("master-0", 'KFTRAIN_METRICS_TOTAL {"epoch": 20}')
    for epoch in range(1, 11):  # one epoch a second for 10 s
        clock.now += 1.0
        collector.feed("master-0", f'KFTRAIN_METRICS {{"epoch": {epoch}, "loss": {1 / epoch}, "val_accuracy": 0.9}}')
        collector.feed("worker-0", "plain output")
    collector.close()
    assert 2 <= len(said) <= 4  # at most one line per 5 s over 10 s, plus the last
    assert said[-1] == "progress: epoch 10/20 loss 0.1 val_accuracy 0.9 | 1 epoch/s eta 10s (master-0)"
    collector.close()
    assert len(said) == collector.lines_said  # nothing new: nothing said again


def test_identical_replicas_are_one_series_and_differing_ones_are_kept_apart() -> None:
    collector = Collector(None)
    for label in ("master-0", "worker-0"):
        collector.feed(label, 'KFTRAIN_METRICS {"epoch": 1, "loss": 0.5}')
        collector.feed(label, 'KFTRAIN_METRICS {"epoch": 2, "loss": 0.25}')
    collector.feed("worker-1", 'KFTRAIN_METRICS {"epoch": 1, "loss": 0.7}')
    assert list(collector.groups()) == ["master-0, worker-0", "worker-1"]
    assert collector.final_values() == {"epoch": 2.0, "loss": 0.25, "loss.worker-1": 0.7}


def test_crc32c_known_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C


def test_event_file_is_read_by_tensorflows_reader(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    points = [{"epoch": 1.0, "loss": 0.5, "acc": 0.8}, {"epoch": 2.0, "loss": 0.25, "acc": 0.9}]
    path = tmp_path / "events.out.tfevents.1.test"
    path.write_bytes(scalar_events(points, "epoch", wall_time=1234.5))
    events = list(tf.compat.v1.train.summary_iterator(str(path)))
    assert events[0].file_version == "brain.Event:2"
    read = [(e.step, {v.tag: round(v.simple_value, 6) for v in e.summary.value}) for e in events[1:]]
    assert read == [(1, {"loss": 0.5, "acc": 0.8}), (2, {"loss": 0.25, "acc": 0.9})]


# Chromium lays out the page, then this script measures every drawn curve, and the DOM dump carries the result.
_PROBE = """<script>
const out = [];
for (const svg of document.querySelectorAll('svg[data-metric]')) {
  const lines = [...svg.querySelectorAll('polyline.curve')].map(p => {
    const b = p.getBBox(); return {series: p.dataset.series, w: b.width, h: b.height, len: p.getTotalLength()};
  });
  const box = svg.getBoundingClientRect();
  out.push({metric: svg.dataset.metric, width: box.width, height: box.height, lines});
}
const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def rendered(page: str, tmp_path: Path) -> list[dict[str, object]]:
    """What headless Chromium drew of ``page``: per chart, its size and each curve's box and length."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium on this machine")
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", _PROBE + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    result: list[dict[str, object]] = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return result


def test_curves_page_draws_one_chart_per_metric_and_one_line_per_series(tmp_path: Path) -> None:
    groups = {
        "master-0, worker-0": [{"epoch": e, "loss": 1 / e, "val_accuracy": 0.5 + e / 20} for e in range(1, 6)],
        "worker-1": [{"epoch": e, "loss": 1.2 / e} for e in range(1, 6)],
    }
    page = render(groups, "PyTorchJob demo")
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    charts = rendered(page, tmp_path)
    assert [c["metric"] for c in charts] == ["loss", "val_accuracy"]
    loss, accuracy = charts
    assert [line["series"] for line in loss["lines"]] == ["master-0, worker-0", "worker-1"]  # type: ignore[index]
    assert [line["series"] for line in accuracy["lines"]] == ["master-0, worker-0"]  # type: ignore[index]
    for chart in charts:
        assert chart["width"] > 400 and chart["height"] > 200  # type: ignore[operator]
        for line in chart["lines"]:  # type: ignore[attr-defined]
            assert line["w"] > 300 and line["h"] > 50 and line["len"] > 300

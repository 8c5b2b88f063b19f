"""What a program prints as metrics can neither break nor flood the launch step: names are shown as text (no
control character, no forged log line, no encoding error), values beyond float32 are stored clamped and said,
the points and names kept are bounded (thinned, not cut), the HTML page is bounded, and a SIGTERM during the
post-processing is honoured with the spool removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.metrics import collect, html, parse_line
from kftrain.metrics.collect import Collector
from kftrain.metrics.html import render
from kftrain.metrics.tensorboard import FLOAT32_MAX, scalar_events
from testbed.manifests import as_yaml, pytorchjob, replica


def line(**values: object) -> str:
    return "KFTRAIN_METRICS " + json.dumps(values)


def collected(*lines: str, label: str = "master-0") -> tuple[Collector, list[str]]:
    said: list[str] = []
    collector = Collector(said.append, every_s=0.0)
    for text in lines:
        collector.feed(label, text)
    collector.close()
    return collector, said


# --------------------------------------------------------------------------------------------------
# Names are text; odd lines are ignored, never a traceback

NAMES = {
    "a newline and a forged log line": ("loss\n[kftrain] job succeeded", "loss?[kftrain] job succeeded"),
    "terminal escape codes": ("\x1b[2J\x1b[31mloss", "?[2J?[31mloss"),
    "a carriage return": ("loss\rval", "loss?val"),
    "a lone surrogate": ("loss\ud800", "loss?"),
    "a line separator": ("a\u2028b", "a?b"),
    "a name too long to show": ("x" * 5000, "x" * 197 + "..."),
}


@pytest.mark.parametrize("case", NAMES)
def test_metric_names_are_shown_as_text(case: str, tmp_path: Path) -> None:
    name, shown = NAMES[case]
    collector, said = collected(line(step=1, **{name: 0.5}))
    assert collector.final_values() == {"step": 1.0, shown: 0.5}
    for text in said:
        assert text.isprintable() and "\n" not in text
    log = tmp_path / "step.log"
    with log.open("w", encoding="utf-8", errors="strict") as out:  # a strict stream: no encoding error either
        out.write("\n".join(said))
    assert not any(row.startswith("[kftrain]") for row in log.read_text().splitlines())
    assert scalar_events(collector.series()["master-0"], "step")  # TensorBoard takes the name too


@pytest.mark.parametrize(
    "text",
    [
        "KFTRAIN_METRICS " + "[" * 20_000,  # nested deeper than the JSON parser goes
        'KFTRAIN_METRICS {"loss": 1' + "0" * 400 + "}",  # an integer beyond a float's range
        'KFTRAIN_METRICS {"loss": 1e999}',  # infinity
        'KFTRAIN_METRICS {"loss": NaN}',
    ],
    ids=["deep nesting", "a huge integer", "infinity", "NaN"],
)
def test_a_line_with_no_usable_number_is_ignored(text: str) -> None:
    assert parse_line(text) is None
    collector, said = collected(text)
    assert collector.final_values() == {} and said == []


# --------------------------------------------------------------------------------------------------
# Values beyond float32: stored clamped, said


@pytest.mark.parametrize("value", [1e308, 4e38, -1e300, FLOAT32_MAX])
def test_a_value_beyond_float32_is_stored_clamped(value: float) -> None:
    clamped: set[str] = set()
    data = scalar_events([{"step": 1, "loss": value, "acc": 0.5}], "step", clamped=clamped)
    assert data.count(b"loss") == 1
    assert clamped == ({"loss"} if abs(value) > FLOAT32_MAX else set())


# --------------------------------------------------------------------------------------------------
# Bounded: points thinned per kind of point, names capped, both said once naming the replica


def test_points_are_thinned_keeping_each_curve_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect, "MAX_POINTS", 200)
    lines = []
    for step in range(20_000):
        lines.append(line(step=step, loss=1.0 / (step + 1)))
        if step % 1000 == 999:
            lines.append(line(step=step, val_accuracy=step / 20_000))
    collector, said = collected(*lines, label="worker-3")
    points = collector.series()["worker-3"]
    assert len(points) <= 201
    losses = [p["step"] for p in points if "loss" in p]
    assert losses[0] == 0 and losses[-1] == 19_999  # the curve keeps its length, at a coarser step
    assert len([p for p in points if "val_accuracy" in p]) == 20  # the rarer kind keeps every point
    assert collector.final_values()["step"] == 19_999
    notes = [text for text in said if "more than 200 points" in text]
    assert len(notes) == 1 and "worker-3" in notes[0]


def test_distinct_names_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect, "MAX_NAMES", 50)
    collector, said = collected(*(line(step=1, **{f"m{i}": float(i)}) for i in range(20_000)), label="master-0")
    names = {name for point in collector.series()["master-0"] for name in point}
    assert len(names) == 50 and "m48" in names and "m49" not in names  # "step" is one of them
    notes = [text for text in said if "more than 50 distinct names" in text]
    assert len(notes) == 1 and "master-0" in notes[0] and "'m49'" in notes[0]


def test_the_html_page_is_bounded() -> None:
    groups = {"master-0": [{"step": 1.0, **{f"m{i}": float(i) for i in range(20_000)}}]}
    page = render(groups, "many names")
    assert page.count("<figure>") == html.MAX_CHARTS
    assert f"{20_000 - html.MAX_CHARTS} more curves are not drawn" in page
    long = {"master-0": [{"step": float(i), "loss": 1.0 / (i + 1)} for i in range(50_000)]}
    coordinates = render(long, "long").split('points="', 1)[1].split('"', 1)[0]
    assert len(coordinates.split()) <= html.MAX_DRAWN + 1


# --------------------------------------------------------------------------------------------------
# A SIGTERM while the curves are written is honoured, and the spool goes

STEP = textwrap.dedent(
    '''
    import os, signal, sys
    from kftrain.backends.base import BackendConfig
    from kftrain.job import load_manifest
    from kftrain.launch.observe import observing
    from kftrain.signals import Terminated


    class Console:
        """The step's output; its pod is deleted (SIGTERM) as soon as the logs are kept, the curves not yet."""

        def write(self, text):
            sys.stdout.write(text)
            if text.startswith("[kftrain] replica logs:"):
                os.kill(os.getpid(), signal.SIGTERM)

        def flush(self):
            sys.stdout.flush()


    try:
        with observing(BackendConfig(out=Console()), load_manifest(sys.argv[2]), sys.argv[1], 3600.0) as observer:
            for replica in range(50):
                for step in range(100):
                    observer.sink(f"worker-{replica}", f'KFTRAIN_METRICS {{"step": {step}, "loss": {replica + step}}}')
    except Terminated as exc:
        sys.exit(exc.exit_code)
    '''
)


def test_a_sigterm_while_the_curves_are_written_is_honoured(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    script.write_text(STEP)
    spool = tmp_path / "tmp"
    spool.mkdir()
    model = tmp_path / "model"
    done = subprocess.run(
        [sys.executable, str(script), str(model), as_yaml(pytorchjob({"Master": replica(1, "pytorch", ["python"])}))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(spool)},
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr
    assert "stopped keeping the job's logs and curves: the step is being stopped" in done.stdout
    assert list(spool.iterdir()) == []  # the spool of every replica's log is removed
    assert len(list(Path(f"{model}-logs").iterdir())) == 51  # every log kept whole (the master's, empty)
    assert not Path(f"{model}-tensorboard").exists()  # the rest was skipped

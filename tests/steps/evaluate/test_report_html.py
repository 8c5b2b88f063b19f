"""The evaluation's HTML report, rendered by headless Chromium: every figure laid out, coloured and drawn.

The report is evaluated on real bundled data (a binary, a multi-class and a regression model, with training
curves), rendered with Chromium, and a probe added to a copy of the page reports what the browser laid out:
each figure's size, its cells, lines and points, and the heatmap's colours. Skips, saying so, without Chromium
(``scripts/install_chromium.sh``, run by ``make install``).
"""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from kftrain.data.dataset import load_split
from kftrain.models import save_model
from kftrain.steps.evaluate import evaluate_model, html_report, quality_gate
from kftrain.steps.prep import prepare_dataset
from testbed.bundled import fit_linear, least_squares, table_source

if TYPE_CHECKING:  # torch is imported by the tests that train, not when the suite is collected
    from torch import nn

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (scripts/install_chromium.sh, run by make install)"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PROBE = """
<script>
const figures = [...document.querySelectorAll("svg.figure")].map((svg) => {
  const box = svg.getBoundingClientRect();
  const cells = [...svg.querySelectorAll("rect.cell")];
  return {
    id: svg.id, width: box.width, height: box.height, cells: cells.length,
    fills: [...new Set(cells.map((c) => getComputedStyle(c).fill))].length,
    lines: [...svg.querySelectorAll("polyline.series")].filter((l) => l.getBBox().width > 0).length,
    points: svg.querySelectorAll("g.points circle").length,
  };
});
const gate = document.getElementById("gate");
const probe = document.createElement("pre");
probe.id = "probe";
probe.textContent = JSON.stringify({figures, gate: gate && getComputedStyle(gate).backgroundColor});
document.body.appendChild(probe);
</script>
"""


def render(page: Path, tmp_path: Path) -> dict:
    """What Chromium laid out on ``page`` (through a probed copy), and a screenshot's size."""
    probed = tmp_path / f"probe-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    profile = tmp_path / f"profile-{page.stem}"
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*common, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:] + dom.stderr[-2000:]
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()], capture_output=True,
                   timeout=120, check=True)  # fmt: skip
    result = json.loads(htmllib.unescape(found.group(1)))
    result["png"] = shot.read_bytes()
    return result


def report(tmp_path: Path, name: str, model: nn.Module, x: np.ndarray, dataset: str, metric: str, **save) -> Path:
    history = [{"epoch": e, "loss": 1 / e, "val_loss": 1.2 / e, "val_accuracy": 1 - 0.5 / e} for e in range(1, 11)]
    save_model(model, str(tmp_path / name), example_input=x[:2], history=history, **save)
    evaluation = evaluate_model(str(tmp_path / name), dataset, batch_rows=32)
    page = tmp_path / f"{name}.html"
    page.write_text(html_report(evaluation, quality_gate(evaluation.metrics, metric, 0.5), title=f"{name} evaluation"))
    return page


def dataset(tmp_path: Path, name: str, data, **options) -> str:
    source = table_source(tmp_path, name, data.data, data.target, [f"f{i}" for i in range(data.data.shape[1])])
    prepare_dataset(str(tmp_path / f"{name}-ds"), source=source, label_column="target", **options)
    return str(tmp_path / f"{name}-ds")


def test_a_binary_report_shows_its_matrix_curves_and_training(tmp_path):
    from sklearn.datasets import load_breast_cancer
    from torch import nn

    ds = dataset(tmp_path, "cancer", load_breast_cancer())
    x, y = load_split(ds, "train")
    page = report(tmp_path, "binary", fit_linear(x, y, 2, nn.CrossEntropyLoss(), epochs=100), x, ds, "roc_auc")
    rendered = render(page, tmp_path)
    figures = {f["id"]: f for f in rendered["figures"]}
    assert set(figures) == {"confusion-matrix", "roc-curve", "pr-curve", "training-loss", "training-accuracy"}
    assert all(f["width"] > 200 and f["height"] > 200 for f in figures.values()), figures
    assert figures["confusion-matrix"]["cells"] == 4 and figures["confusion-matrix"]["fills"] >= 2  # coloured
    assert figures["roc-curve"]["lines"] == 1 and figures["pr-curve"]["lines"] == 1
    assert figures["training-loss"]["lines"] == 2  # loss and val_loss share a chart
    assert rendered["gate"] == "rgb(227, 245, 232)"  # the passed gate's green
    assert rendered["png"].startswith(b"\x89PNG") and len(rendered["png"]) > 20_000


def test_a_multiclass_report(tmp_path):
    from sklearn.datasets import load_wine
    from torch import nn

    ds = dataset(tmp_path, "wine", load_wine())
    x, y = load_split(ds, "train")
    page = report(tmp_path, "multiclass", fit_linear(x, y, 3, nn.CrossEntropyLoss(), epochs=100), x, ds, "accuracy")
    figures = {f["id"]: f for f in render(page, tmp_path)["figures"]}
    assert figures["confusion-matrix"]["cells"] == 9 and figures["confusion-matrix"]["fills"] >= 2
    assert "roc-curve" not in figures


def test_a_regression_report_shows_residuals(tmp_path):
    ds = str(tmp_path / "diabetes")
    prepare_dataset(ds, source="builtin:diabetes", task="regression")
    x, y = load_split(ds, "train")
    page = report(tmp_path, "regression", least_squares(x, y), x, ds, "r2", task="regression")
    figures = {f["id"]: f for f in render(page, tmp_path)["figures"]}
    test_rows = len(load_split(ds, "test")[1])
    assert figures["residual-plot"]["points"] == test_rows and figures["predicted-vs-actual"]["points"] == test_rows
    assert "confusion-matrix" not in figures and figures["training-loss"]["lines"] == 2

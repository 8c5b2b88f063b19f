"""The benchmark harness still runs end to end (tiny sizes; the figures themselves come from `make bench`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_storage_bench_interleaves_rounds_and_reports_ratios(tmp_path: Path) -> None:
    out = tmp_path / "storage.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_storage.py"),
            "--size-mb",
            "6",
            "--repeat",
            "2",
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(out.read_text())
    for impl in ("kftrain", "boto3"):
        entry = data["results"][impl]
        assert entry["total"]["min"] <= entry["total"]["median"] <= entry["total"]["max"]
        assert entry["peak_rss_mb"] >= 0
    assert set(data["ratio_kftrain_over_boto3"]) == {"upload", "download", "total"}
    assert all(r > 0 for r in data["ratio_kftrain_over_boto3"].values())


def test_run_writes_the_results_table(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--only", "P5,P7", "--repeat", "1", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = out.read_text()
    assert text in proc.stdout
    assert "| P5 | compile every pipeline, cold process |" in text
    assert "| P7 |" in text
    assert "error:" not in text

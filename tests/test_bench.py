"""The benchmark harness still runs end to end (tiny sizes; the figures themselves come from `make bench`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_run_reports_p10_as_not_run_until_it_lands(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--only", "P10", "--repeat", "1", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "| P10 |" in out.read_text() and "not run" in out.read_text()


@pytest.mark.slow  # installs the launch image's requirement set with pip (cached after the first run)
def test_p8_measures_the_launch_image_and_its_import(tmp_path: Path) -> None:
    out = tmp_path / "images.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_images.py"), "--images", "launch", "--repeat", "1",
         "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    launch = json.loads(out.read_text())["launch"]
    assert launch["extras"] == ["s3"]
    assert 20 < launch["size_mb"] < 300, launch["largest"]
    names = {name for name, _ in launch["largest"]}
    assert not names & {"torch", "tensorflow", "pyarrow", "numpy", "sklearn", "onnxruntime"}, names
    assert len(launch["import_s"]) == 1 and 0 < launch["import_s"][0] < 60


@pytest.mark.slow  # installs kubeflow-training (the baseline) with pip, into a cache folder, on its first run
def test_p9_counts_what_each_launcher_asks_of_the_api_server(tmp_path: Path) -> None:
    out = tmp_path / "launcher.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_launcher.py"), "--jobs", "2", "--duration", "4",
         "--polling", "1", "--settle", "1", "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    data = json.loads(out.read_text())
    ours, baseline = data["ours"], data["baseline"]
    assert ours["ok"] == 2 and baseline["ok"] == 2, (ours["failed_logs"], baseline["failed_logs"])
    assert ours["operator_errors"] == [] and baseline["operator_errors"] == []
    # Per job: one create; one watch each of the job and of its pods, from the create's version (no list first,
    # no renewal within the watch window); a log stream per replica; one list of the pods once the job ended.
    assert ours["requests_by_verb_per_job"] == {"create": 1.0, "list": 1.0, "log-follow": 4.0, "watch": 2.0}
    assert ours["steady_requests_per_job_minute"] == 0
    assert ours["steady_job_minutes"] > 0  # the steady state was measured, not empty
    # The SDK creates the job, then reads it every second (polling 1 here) until it ends; it watches nothing.
    assert set(baseline["requests_by_verb_per_job"]) == {"create", "get"}
    assert baseline["requests_by_verb_per_job"]["create"] == 1.0
    assert baseline["requests_by_verb_per_job"]["get"] >= 3
    assert baseline["steady_requests_per_job_minute"] > 0 and baseline["steady_job_minutes"] > 0
    assert baseline["peak_open"] == {}
    # A job's own watches and log streams are open at once (both jobs' at once, when they overlap).
    assert 2 <= ours["peak_open"]["watch"] <= 4 and 4 <= ours["peak_open"]["log-follow"] <= 8, ours["peak_open"]
    assert 0 < ours["rss_mb"]["max"] < 150  # P9's goal per launcher
    assert ours["cpu_s_per_job_minute"] > 0

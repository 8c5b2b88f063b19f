"""The benchmark harness still runs end to end (tiny sizes; the figures themselves come from `make bench`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import REPO_ROOT, reference
from testbed.s3_server import boto3_client
from testbed.scripts import load_script

ROOT = REPO_ROOT
load = load_script("bench/load.py", "bench_load")


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


def test_prep_bench_interleaves_ours_and_pyarrow_at_each_size(tmp_path: Path) -> None:
    out = tmp_path / "prep.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_prep.py"), "--sizes-mb", "2,4", "--repeat", "2",
         "--workdir", str(tmp_path), "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert list(data["sizes"]) == ["2", "4"]
    for size, entry in data["sizes"].items():
        assert entry["bytes"] >= int(size) * 2**20 and entry["rows"] > 0
        sides = [(r["round"], r["side"]) for r in entry["runs"]]
        # Round 0: pyarrow, ours, then the no-dictionary reference; round 1 starts with ours.
        assert sides == [(0, "pyarrow"), (0, "ours"), (0, "pyarrow-no-dictionary"), (1, "ours"), (1, "pyarrow")]
        assert all(r["seconds"] > 0 and r["rss_mb"] > 0 and r["peak_of_run"] for r in entry["runs"])
    assert [p.name for p in tmp_path.iterdir()] == ["prep.json"]  # sources and outputs deleted


def test_evaluation_bench_scores_the_same_rows_as_the_bare_loop(tmp_path: Path) -> None:
    out = tmp_path / "evaluation.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_evaluation.py"), "--rows", "3000", "--scales", "1,2",
         "--repeat", "1", "--features", "8", "--classes", "3", "--workdir", str(tmp_path), "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert int(data["test_rows"]["1"]) >= 3000 and int(data["test_rows"]["2"]) >= 6000
    runs = {(r["scale"], r["format"], r["side"]): r for r in data["runs"]}
    assert len(runs) == 8  # 2 scales x 2 formats x ours and bare
    for (scale, fmt, _), r in runs.items():
        bare = runs[(scale, fmt, "bare")]
        assert r["rows"] == bare["rows"] == data["test_rows"][str(scale)]
        assert r["accuracy"] == pytest.approx(bare["accuracy"], abs=1e-9)
        assert r["seconds"] > 0 and r["rss_mb"] > 0 and r["rss_base_mb"] > 0
        assert r["peak_of_run"]  # the peak is the run's own, not its imports' (Linux)
    assert [p.name for p in tmp_path.iterdir()] == ["evaluation.json"]


@pytest.mark.parametrize(
    ("alone", "together", "busy"),
    [(0.2, 0.21, False), (0.2, 0.24, False), (0.2, 0.3, True), (0.2, 0.41, True)],
)
def test_a_busy_machine_is_flagged_by_its_calibration(alone: float, together: float, busy: bool) -> None:
    quiet = load.Load(0.1, 0.2, 0.2, 2)
    seen = load.Load(1.5, alone, together, 2)
    assert seen.busy is busy
    assert ("machine BUSY" in load.describe(quiet, seen)) is busy
    assert ("machine BUSY" in load.describe(seen, quiet)) is busy


def test_the_calibration_measures_this_machine() -> None:
    found = load.calibrate(iterations=200_000)
    assert found.cores == os.cpu_count() and found.alone_s > 0 and found.together_s > 0
    assert found.contention > 0


@pytest.mark.slow  # installs the launch image's requirement set with pip (cached after the first run)
def test_p8_measures_the_launch_image_and_its_import(tmp_path: Path) -> None:
    out = tmp_path / "images.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_images.py"), "--images", "launch", "--repeat", "1",
         "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    launch = json.loads(out.read_text())["launch"]
    assert launch["extras"] == ["mlflow", "s3"]  # the step logs to KFP 2.17's MLflow run when it has one
    assert 20 < launch["size_mb"] < 300, launch["largest"]
    names = {name for name, _ in launch["largest"]}
    assert not names & {"torch", "tensorflow", "pyarrow", "numpy", "sklearn", "onnxruntime"}, names
    assert len(launch["import_s"]) == 1 and 0 < launch["import_s"][0] < 60


@pytest.mark.slow  # installs kubeflow-training (the baseline) with pip, into a cache folder, on its first run
def test_p9_counts_what_each_launcher_asks_of_the_api_server(tmp_path: Path) -> None:
    reference.required(reference.CRD_DIR)  # the benchmark's fake API server validates jobs against them
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
    assert ours["steady_requests_per_job_minute"] == 0, ours["steady_requests"]
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


def test_p9_an_operator_slow_to_create_pods_makes_the_steps_read_create_failures(tmp_path: Path) -> None:
    """P14's fake side: the operator creates one job's pods at a time, 5 s each. The second job lacks pods for about
    10 s, past the step's reads at 2 s and 6 s after the job; the first for 5 s, past its read at 2 s (unless its
    step starts its wait over 3 s late). So the two steps list the events at least twice beside their one list of
    pods each; the jobs still end as they should."""
    reference.required(reference.CRD_DIR)
    out = tmp_path / "launcher.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_launcher.py"), "--jobs", "2", "--duration", "2",
         "--settle", "1", "--only", "ours", "--reconcile", "5", "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    ours = json.loads(out.read_text())["ours"]
    assert ours["ok"] == 2 and ours["operator_errors"] == [], ours["failed_logs"]
    per_job = ours["requests_by_verb_per_job"]
    assert per_job["list"] >= 2.0, per_job
    assert {k: v for k, v in per_job.items() if k != "list"} == {"create": 1.0, "log-follow": 4.0, "watch": 2.0}


def _on_the_control_plane(tmp_path: Path, script: str, operators: list[str], *args: str) -> dict:
    """bench/``script`` run with ``args``, its JSON; skipped where the control plane or ``operators`` are not built."""
    from testbed.controlplane.cluster import BUILD_HINT, missing_binaries
    from testbed.controlplane.kubeflow_operators import missing_operators

    missing = missing_binaries(with_controller_manager=True) + missing_operators(operators)
    if missing:
        pytest.skip(f"control plane not built ({', '.join(missing)}): run `{BUILD_HINT}`")
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.controlplane
@pytest.mark.xdist_group("controlplane")  # one control plane per worker at a time
def test_p14_counts_on_the_real_api_server_what_p9_counts_on_the_fake(tmp_path: Path) -> None:
    args = ["--jobs", "2", "--duration", "4", "--settle", "1"]
    data = _on_the_control_plane(tmp_path, "bench_launcher_controlplane.py", ["training-operator"], *args)
    assert data["ok"] == 2 and data["errors"] == [], data["failed_logs"]
    # What P9's test asserts on the fake API server (one create, a watch of the job and one of its pods from the
    # create's version, a log stream per replica, one list of the pods at the end), here from kube-apiserver's audit
    # log: the fake's count is the real server's.
    assert data["requests_by_what_per_job"] == {
        "create pytorchjobs": 1.0,
        "get pods/log": 4.0,
        "list pods": 1.0,
        "watch pods": 1.0,
        "watch pytorchjobs": 1.0,
    }
    assert data["steady_requests_per_job_minute"] == 0 and data["steady_job_minutes"] > 0
    assert data["log_lines_per_step"] >= 4  # the pods' lines, followed through the API server as they came
    assert data["apiserver_cpu_s"] > 0
    # The operator's delay, read from the API server's creationTimestamps, for both jobs.
    assert data["pods_created_after_s"]["jobs"] == 2 and data["pods_created_after_s"]["max"] >= 0
    assert data["operator_s_per_job"] >= 0


@pytest.mark.slow
@pytest.mark.controlplane
@pytest.mark.xdist_group("controlplane")  # one control plane per worker at a time
def test_p15_times_the_fixtures_start_and_reads_each_process(tmp_path: Path) -> None:
    from testbed.controlplane.kubeflow_operators import OPERATORS

    # Every operator built: the script's warm build runs both build scripts whole, which would build what is missing.
    args = ["--repeat", "1", "--idle", "1", "--operators", "training-operator"]
    data = _on_the_control_plane(tmp_path, "bench_controlplane.py", list(OPERATORS), *args)
    # The scripts found everything built, as make controlplane left it, and said they built nothing.
    assert data["warm_build"]["built_nothing"] and data["warm_build"]["built"] == {}, data["warm_build"]
    (start,) = data["starts"]
    phases = start["phases_s"]
    assert list(phases) == ["etcd", "kube-apiserver", "crds", "kube-controller-manager", "operators"]
    assert 0 < phases["etcd"] < phases["kube-apiserver"] < phases["crds"] <= phases["operators"] <= start["start_s"]
    processes = ["etcd", "kube-apiserver", "kube-controller-manager", "training-operator"]
    assert sorted(start["rss_bytes"]) == sorted(start["idle_cpu_s"]) == sorted(processes)
    assert all(rss > 0 for rss in start["rss_bytes"].values())
    assert start["left_running"] == [] and start["stop_s"] > 0


def test_p10_checkpoint_stall_times_every_mode_and_publishes_the_checkpoints(tmp_path: Path, moto) -> None:
    """Tiny model, 2 interleaved rounds against the tests' S3 server: per-round ratios for async and sync, and
    every checkpointing run's checkpoints published complete (none for the baseline)."""
    out = tmp_path / "p10.json"
    bucket = "p10-smoke"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "programs" / "checkpoint_stall.py"), "--steps", "4", "--every", "2",
         "--warmup", "1", "--widths", "32,64,10", "--repeat", "2", "--endpoint", moto.endpoint, "--bucket", bucket,
         "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["parameters"] == 32 * 64 + 64 + 64 * 10 + 10
    assert [sorted(r) for r in data["rounds"]] == [["async", "none", "sync"]] * 2
    assert set(data["round_ratios"]) == {"async", "sync"}
    assert all(len(v) == 2 and all(r > 0 for r in v) for v in data["round_ratios"].values())
    keys = [o["Key"] for o in boto3_client(moto.endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])]
    complete = sorted(k.rsplit("/", 1)[0] for k in keys if k.endswith("/_COMPLETE.json"))
    # Checkpoints after timed steps 2 and 4 (steps 3 and 5 counting the warm-up one), both kept.
    assert complete == [
        f"round-{r}/{mode}/ckpt-{step:010d}" for r in (0, 1) for mode in ("async", "sync") for step in (3, 5)
    ]


def test_p11_measures_each_releases_downloads(tmp_path: Path) -> None:
    """Evaluation and export get the model alone on every release; the model as KFP provisioned its URI brought
    what the job left beside it before 2.17."""
    out = tmp_path / "p11.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "bench_launch_download.py"), "--mib", "2", "--model-mib", "1",
                    "--json", str(out)], check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    data = json.loads(out.read_text())
    model, stored = data["model_bytes"], sum(data["stored"].values())
    assert list(data["releases"]) == ["2.5", "2.14", "2.15", "2.16", "2.17"]
    for name, release in data["releases"].items():
        assert release["folder"]["pytorchjob-launch"] == {}, name
        for step in ("evaluate-model", "export-model"):
            assert release["folder"][step]["model"] == model, (name, step)
            assert release["provisioned"][step]["model"] == (model if name == "2.17" else stored), (name, step)


def _function_job_bench(tmp_path: Path, *args: str) -> dict:
    """bench/bench_function_job.py (P13), its jobs' temporary folders (kftrain's workdirs, the peer's per-job
    virtual environment) under ``tmp_path``; afterwards nothing is left there but its JSON."""
    out = tmp_path / "p13.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    subprocess.run([sys.executable, str(ROOT / "bench" / "bench_function_job.py"), *args, "--json", str(out)],
                   check=True, capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["p13.json"]
    data = json.loads(out.read_text())
    assert data["left_in_tmp"] == []
    return data


@pytest.mark.slow  # three jobs of torch processes meeting over gloo (one of 2 nodes x 2 processes)
def test_p13_runs_the_function_as_kftrain_jobs(tmp_path: Path) -> None:
    """kftrain's side of P13 only: the peer's side makes a virtual environment and pip-installs torch (about
    2.7 GB of wheels) for every job, which the next test does once."""
    data = _function_job_bench(tmp_path, "--only", "ours", "--repeat", "1")
    assert data["sides"] == ["ours"] and "peer_install_s" not in data
    # Each job's ranks printed their sum (checked by the bench, which fails otherwise) and took a real time.
    assert [sorted(r) for r in data["rounds"]] == [["ours"]] and data["rounds"][0]["ours"] > 0
    assert len(data["ours_2x2"]) == 1 and len(data["ours_pytorchjob"]) == 1
    assert data["torch_requirement"].startswith("torch==")


@pytest.mark.slow
def test_p13_runs_the_function_through_the_kubeflow_sdk(tmp_path: Path) -> None:
    """The peer's side, once P13 has made its environment: building it downloads torch's wheels (about 2.7 GB), a
    benchmark's cost that no test run pays (``python bench/run.py --only P13`` makes it, in ~/.cache)."""
    p13 = load_script("bench/bench_function_job.py", "bench_function_job")
    if not (p13.PEER_DIR / ".installed").exists() or not (p13.PEER_WHEELS / ".downloaded").exists():
        pytest.skip(f"the Kubeflow SDK's environment is not made: python bench/run.py --only P13 makes {p13.PEER_DIR}")
    data = _function_job_bench(tmp_path, "--only", "peer", "--repeat", "1", "--no-reference")
    peer = data["rounds"][0]["peer"]
    assert peer["status"] == "Complete" and peer["seconds"] > 0
    # Its job installed torch into a fresh environment, from the folder of wheels: nothing downloaded.
    assert any(p.startswith("torch-") for p in peer["installed"]) and peer["downloaded"] == 0
    assert data["peer_wheels_mb"] > 100 and "peer_downloading" not in data


P13_DATA = {
    "torch_requirement": "torch==2.13.0",
    "peer_install_s": {},
    "peer_wheels_mb": 2740.7,
    "peer_downloading": {"seconds": 61.5, "downloaded": 29},
    "rounds": [
        {
            "ours": 5.0,
            "peer": {
                "seconds": 40.0,
                "installed": ["torch-2.13.0", "triton-3.7.1", "nvidia-nccl-cu13-2"],
                "downloaded": 0,
            },
        },
        {"ours": 6.0, "peer": {"seconds": 48.0, "installed": [], "downloaded": 0}},
        {"ours": 5.5, "peer": {"seconds": 44.0, "installed": [], "downloaded": 0}},
    ],
    "ours_2x2": [7.5, 9.0, 8.8],
    "ours_pytorchjob": [1.8, 1.9, 2.0],
}


@pytest.mark.parametrize(("quick", "reference"), [(False, "61.5 s"), (True, "downloading run left out")])
def test_p13_row_sets_kftrain_beside_the_sdk_and_reports_two_by_two(monkeypatch, quick: bool, reference: str) -> None:
    sys.modules.setdefault("load", load)  # run.py imports bench/load.py by its plain name
    run = load_script("bench/run.py", "bench_run")
    commands = []

    def fake_timed(cmd: list[str], **_: object) -> tuple[float, str]:
        commands.append(cmd)
        data = {k: v for k, v in P13_DATA.items() if k != "peer_downloading" or "--no-reference" not in cmd}
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(data))
        return 0.0, ""

    monkeypatch.setattr(run, "timed", fake_timed)
    one, two = run.p13_function_job(3, quick)
    assert ("--no-reference" in commands[0]) is quick and commands[0][commands[0].index("--repeat") + 1] == "3"
    # Per round ours ÷ peer (5/40, 6/48, 5.5/44 = 0.125 each); medians in the row, the goal met.
    assert one.ratios == pytest.approx([0.125] * 3)
    assert one.row().endswith("| 5.500 s | 44.000 s | 0.125 / 0.125 / 0.125 | ≤ 0.25 | met |")
    # 2 x 2 beside kftrain's own 1 x 1, round by round; the row says why no peer figure stands there.
    assert two.ratios == pytest.approx([1.5, 1.5, 1.6])
    assert "no peer figure" in two.row() and "| 8.800 s | 5.500 s |" in two.row()
    notes = " ".join(one.notes)
    assert "3 packages (torch-2.13.0, triton-3.7.1, 1 nvidia-*/cuda-* libraries, 2.7 GB of wheels)" in notes
    assert "0 file(s) downloaded by the timed jobs" in notes and reference in notes
    assert "1.90 s (1.80 / 2.00)" in notes


def p16_run(side: str, replicas: int, attempt: int, tokens_per_s: float) -> dict[str, object]:
    return {"side": side, "replicas": replicas, "attempt": attempt, "tokens_per_s": tokens_per_s, "loss": 0.08,
            "train_seconds": 20.0, "wall_seconds": 35.0, "peak_rss_mb_max_process": 1000.0 + attempt,
            "launch_step_rss_mb": 95.0, "load_average": 1.5, "program_cpu_seconds": 40.0,
            "launch_step_cpu_seconds": 3.0}  # fmt: skip


def test_p16_row_sets_the_launch_step_beside_bare_torchrun_pair_by_pair(monkeypatch) -> None:
    sys.modules.setdefault("load", load)  # run.py imports bench/load.py by its plain name
    run = load_script("bench/run.py", "bench_run")
    bare = {1: [5000.0, 4000.0, 5000.0], 2: [6000.0, 6000.0, 3000.0]}
    launch = {1: [4900.0, 4400.0, 4500.0], 2: [5400.0, 6000.0, 3300.0]}
    commands = []

    def fake_timed(cmd: list[str], **_: object) -> tuple[float, str]:
        commands.append(cmd)
        runs = [p16_run(side, n, i, rates[n][i]) for n in (1, 2) for i in range(3)
                for side, rates in (("bare", bare), ("launch", launch))]  # fmt: skip
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps({"runs": runs}))
        return 0.0, ""

    monkeypatch.setattr(run, "timed", fake_timed)
    one, two = run.p16_llm_finetune(3, False)
    assert "--compare" in commands[0] and commands[0][commands[0].index("--repeat") + 1] == "3"
    # Each pair's launch ÷ its own bare run, not the medians' ratio.
    assert one.ratios == pytest.approx([0.98, 1.1, 0.9])
    assert one.row().endswith("| 4500.000 tokens/s | 5000.000 tokens/s | 0.900 / 0.980 / 1.100 | ≥ 0.95 | met |")
    assert two.ratios == pytest.approx([0.9, 1.0, 1.1])
    assert "1 replica(s)" in one.title and "2 replica(s)" in two.title
    assert "peak RSS of its largest process (MB) launch 1000 / 1001 / 1002" in two.notes[0]
    assert "the launch step's own peak RSS 95 / 95 / 95 MB, CPU 3 / 3 / 3 s" in one.notes[0]

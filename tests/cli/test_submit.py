"""``kftrain submit`` / ``kftrain schedule`` through the real ``kfp.Client`` against a fake KFP API server."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kfp.client.client
import pytest
import yaml
from urllib3.exceptions import ProtocolError

from kftrain import __version__
from kftrain.cli.kfp import add_commands
from kftrain.cli.kfp.connection import ENV_HOST, ENV_NAMESPACE, ENV_TOKEN
from kftrain.cli.kfp.package import PipelinePackage, default_version_name, git_sha, resolve_package
from kftrain.cli.kfp.schedule_spec import validate_cron
from kftrain.cli.kfp.submit import wait_for_run
from kftrain.cli.params import parse_params
from kftrain.errors import KftrainError
from testbed import REPO_ROOT
from testbed.fake_kfp import FakeKFP
from testbed.ports import refusing_url

ROOT = REPO_ROOT
DIGITS_YAML = ROOT / "pipelines" / "training" / "pytorch_digits" / "pipeline.yaml"
SHA = "abc1234"
VERSION = f"{__version__}-{SHA}"
TOKEN = "s3cr3t"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeKFP]:
    # Hermetic: no ~/.config/kfp/context.json, no KFP_* from the environment, a fixed git sha.
    monkeypatch.setattr(kfp.client.client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in (ENV_HOST, ENV_NAMESPACE, ENV_TOKEN):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("kftrain.cli.kfp.package.git_sha", lambda where: SHA)
    server = FakeKFP(default_page_size=2, max_page_size=2).start()  # small pages: the client must page
    yield server
    server.stop()


def kftrain(*argv: str) -> int:
    """The CLI as kftrain.cli.app wires it: a fresh parser with the submit/schedule commands."""
    parser = argparse.ArgumentParser(prog="kftrain")
    sub = parser.add_subparsers(dest="command_name", required=True)
    add_commands(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def server_args(fake: FakeKFP, token: str | None = TOKEN) -> list[str]:
    return ["--host", fake.url] + (["--token", token] if token else [])


def only(requests: list[Any]) -> Any:
    assert len(requests) == 1, requests
    return requests[0]


# --- submit -----------------------------------------------------------------------------------------


def test_submit_new_pipeline_uploads_it_and_runs_with_params(fake: FakeKFP, capsys: pytest.CaptureFixture) -> None:
    rc = kftrain(
        "submit",
        "pytorch-digits",
        *server_args(fake),
        "--experiment",
        "nightly",
        "--param",
        "epochs=5",
        "--param",
        "learning_rate=0.1",
        "--param",
        "source=s3://bucket/digits.parquet",
        "--param",
        'backend="local"',
        "--run-name",
        "smoke",
    )
    assert rc == 0
    upload = only(fake.calls("POST", "/pipelines/upload"))
    assert upload.query["name"] == "pytorch-digits"
    filename, content = upload.files["uploadfile"]
    assert filename == "pipeline.yaml"
    assert content == DIGITS_YAML.read_bytes()
    assert not fake.calls("POST", "/pipelines/upload_version")

    experiment = only(fake.calls("POST", "/experiments"))
    assert experiment.body["display_name"] == "nightly"

    run = only(fake.calls("POST", "/runs")).body
    assert run["display_name"] == "smoke"
    assert run["runtime_config"]["parameters"] == {
        "epochs": 5,
        "learning_rate": 0.1,
        "source": "s3://bucket/digits.parquet",
        "backend": "local",
    }
    (pipeline,) = fake.pipelines.values()
    (version,) = fake.versions.values()
    assert run["pipeline_version_reference"] == {
        "pipeline_id": pipeline["pipeline_id"],
        "pipeline_version_id": version["pipeline_version_id"],
    }
    assert run["experiment_id"] == next(iter(fake.experiments))
    assert "pipeline_spec" not in run or run["pipeline_spec"] is None  # by reference, not inline
    # The token reaches the server on every request.
    assert fake.requests and {r.headers.get("authorization") for r in fake.requests} == {f"Bearer {TOKEN}"}
    out = capsys.readouterr().out
    assert "created experiment 'nightly'" in out
    assert "uploaded: pipeline 'pytorch-digits'" in out
    assert f"/#/runs/details/{next(iter(fake.runs))}" in out


@pytest.mark.parametrize(
    ("existing_versions", "uploads_version", "action"),
    [
        pytest.param([], True, "uploaded new version", id="new-version"),
        pytest.param([VERSION], False, "reused existing version", id="same-version-reused"),
        pytest.param(["0.0.9-old", "x", "y", VERSION], False, "reused existing version", id="reused-among-many"),
    ],
)
def test_submit_existing_pipeline_uploads_or_reuses_version(
    fake: FakeKFP, capsys: pytest.CaptureFixture, existing_versions: list[str], uploads_version: bool, action: str
) -> None:
    pipeline = fake.add_pipeline("pytorch-digits")
    for name in existing_versions:
        fake.add_version(pipeline["pipeline_id"], name)
    versions_before = len(fake.versions)

    assert kftrain("submit", "pytorch-digits", *server_args(fake)) == 0

    assert not fake.calls("POST", "/pipelines/upload")
    uploads = fake.calls("POST", "/pipelines/upload_version")
    assert len(uploads) == int(uploads_version)
    if uploads_version:
        assert uploads[0].query == {"name": VERSION, "pipelineid": pipeline["pipeline_id"]}
        assert uploads[0].files["uploadfile"][1] == DIGITS_YAML.read_bytes()
        assert len(fake.versions) == versions_before + 1
    wanted = next(v for v in fake.versions.values() if v["display_name"] == VERSION)
    run = only(fake.calls("POST", "/runs")).body
    assert run["pipeline_version_reference"]["pipeline_version_id"] == wanted["pipeline_version_id"]
    assert f"{action}: pipeline 'pytorch-digits'" in capsys.readouterr().out


def test_submit_reuses_an_experiment_by_name(fake: FakeKFP, capsys: pytest.CaptureFixture) -> None:
    for name in ("a", "b", "Default", "c"):  # more than a page of experiments
        fake.add_experiment(name)
    wanted = next(e for e in fake.experiments.values() if e["display_name"] == "Default")

    assert kftrain("submit", "pytorch-digits", *server_args(fake)) == 0

    assert not fake.calls("POST", "/experiments")
    assert only(fake.calls("POST", "/runs")).body["experiment_id"] == wanted["experiment_id"]
    assert "using experiment 'Default'" in capsys.readouterr().out


def test_submit_reads_server_namespace_and_token_from_the_environment(
    fake: FakeKFP, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFP_HOST", fake.url)
    monkeypatch.setenv("KFP_NAMESPACE", "team-a")
    monkeypatch.setenv("KFP_TOKEN", "from-env")
    fake.required_token = "from-env"

    assert kftrain("submit", "pytorch-digits") == 0

    assert only(fake.calls("POST", "/experiments")).body["namespace"] == "team-a"
    assert only(fake.calls("POST", "/pipelines/upload")).query["namespace"] == "team-a"
    assert all(r.headers["authorization"] == "Bearer from-env" for r in fake.requests)


def test_submit_a_pipeline_file_by_path(fake: FakeKFP, tmp_path: Path) -> None:
    package = tmp_path / "mine.yaml"
    shutil.copy(DIGITS_YAML, package)

    assert kftrain("submit", str(package), *server_args(fake), "--pipeline-name", "my-digits") == 0

    upload = only(fake.calls("POST", "/pipelines/upload"))
    assert upload.query["name"] == "my-digits"
    assert upload.files["uploadfile"] == ("mine.yaml", DIGITS_YAML.read_bytes())


@pytest.mark.parametrize(
    ("states", "rc", "final"),
    [
        pytest.param(["PENDING", "RUNNING", "SUCCEEDED"], 0, "SUCCEEDED", id="succeeded"),
        pytest.param(["PENDING", "RUNNING", "FAILED"], 1, "FAILED", id="failed"),
        pytest.param(["PENDING", "CANCELED"], 1, "CANCELED", id="canceled"),
    ],
)
def test_submit_wait_follows_the_run_to_its_end(
    fake: FakeKFP, capsys: pytest.CaptureFixture, states: list[str], rc: int, final: str
) -> None:
    fake.run_states = states
    assert kftrain("submit", "pytorch-digits", *server_args(fake), "--wait", "--poll-seconds", "0.01") == rc

    captured = capsys.readouterr()
    (run_id,) = fake.runs
    reported = [line.split(": ")[1].split()[0] for line in captured.out.splitlines() if f"run {run_id}: " in line]
    assert reported[: len(states)] == states  # every state once, in order
    assert fake.runs[run_id]["state"] == final
    if rc:
        assert f"ended {final}" in captured.err
    if final == "FAILED":
        assert "step train failed" in captured.out


@pytest.mark.parametrize(
    ("status", "times", "outcome"),
    [
        pytest.param(503, 2, 0, id="transient-5xx-retried"),
        pytest.param(503, 6, "HTTP 503", id="5xx-too-many-times"),
        pytest.param(404, 1, "HTTP 404", id="4xx-not-retried"),
    ],
)
def test_submit_wait_rides_out_transient_errors(
    fake: FakeKFP, capsys: pytest.CaptureFixture, status: int, times: int, outcome: int | str
) -> None:
    fake.fail("GET", "/runs/[^/]+", status, times)
    argv = ["submit", "pytorch-digits", *server_args(fake), "--wait", "--poll-seconds", "0.01"]
    if isinstance(outcome, int):
        assert kftrain(*argv) == outcome
        assert capsys.readouterr().out.count("polling failed (HTTP 503") == times
    else:
        with pytest.raises(KftrainError, match=outcome):
            kftrain(*argv)


@pytest.mark.parametrize(("drops", "tolerated"), [(2, 2), (3, 2)], ids=["ridden-out", "one-too-many"])
def test_wait_for_run_retries_a_dropped_connection_poll_seconds_apart(drops: int, tolerated: int) -> None:
    calls = 0

    def get_run(run_id: str) -> Any:
        nonlocal calls
        calls += 1
        if calls <= drops:
            raise ProtocolError("Connection aborted.")
        return SimpleNamespace(state="SUCCEEDED", error=None)

    lines: list[str] = []
    sleeps: list[float] = []
    client = SimpleNamespace(get_run=get_run)
    wait = partial(wait_for_run, client, "r1", poll_seconds=0.5, out=lines.append, sleep=sleeps.append)
    if drops > tolerated:
        with pytest.raises(ProtocolError):
            wait(max_transient_errors=tolerated)
    else:
        assert wait(max_transient_errors=tolerated) == "SUCCEEDED"
    assert sleeps == [0.5] * tolerated
    assert [line for line in lines if "polling failed" in line] == [
        "[kftrain] run r1: polling failed (Connection aborted.), retrying"
    ] * tolerated


def test_submit_wait_times_out(fake: FakeKFP) -> None:
    fake.run_states = ["PENDING", "RUNNING"]
    with pytest.raises(KftrainError, match=r"still RUNNING after 0.05s"):
        kftrain("submit", "pytorch-digits", *server_args(fake), "--wait", "--poll-seconds", "0.01", "--timeout", "0.05")


def test_submit_without_wait_does_not_poll(fake: FakeKFP) -> None:
    assert kftrain("submit", "pytorch-digits", *server_args(fake)) == 0
    assert not fake.calls("GET", "/runs/[^/]+")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["pytorch-digits", "--param", "epochz=3"], "unknown parameter.*epochz", id="unknown-param"),
        pytest.param(["pytorch-digits", "--param", "epochs"], "expected NAME=VALUE", id="param-without-value"),
        pytest.param(["no-such-pipeline"], "unknown pipeline 'no-such-pipeline'", id="unknown-pipeline"),
        pytest.param(["missing.yaml"], "does not exist", id="missing-file"),
    ],
)
def test_submit_rejects_bad_input_before_any_request(fake: FakeKFP, argv: list[str], message: str) -> None:
    with pytest.raises(KftrainError, match=message):
        kftrain("submit", *argv, *server_args(fake))
    assert fake.requests == []


def test_submit_needs_a_host(fake: FakeKFP) -> None:
    with pytest.raises(KftrainError, match="--host or set KFP_HOST"):
        kftrain("submit", "pytorch-digits")


def test_submit_with_a_wrong_token_names_the_problem(fake: FakeKFP) -> None:
    fake.required_token = "right"
    with pytest.raises(KftrainError, match=r"HTTP 401.*check --token / KFP_TOKEN"):
        kftrain("submit", "pytorch-digits", *server_args(fake, token="wrong"), "--namespace", "ns")


def test_submit_to_an_unreachable_server(fake: FakeKFP) -> None:
    with refusing_url() as url, pytest.raises(KftrainError, match="cannot reach the KFP API server"):
        kftrain("submit", "pytorch-digits", "--host", url, "--namespace", "ns")


# --- schedule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "trigger"),
    [
        pytest.param(["--cron", "0 0 3 * * *"], {"cron_schedule": {"cron": "0 0 3 * * *"}}, id="cron-daily"),
        pytest.param(
            ["--cron", "0 */15 9-17 ? * MON-FRI"],
            {"cron_schedule": {"cron": "0 */15 9-17 ? * MON-FRI"}},
            id="cron-workdays",
        ),
        pytest.param(["--interval-seconds", "3600"], {"periodic_schedule": {"interval_second": 3600}}, id="interval"),
    ],
)
@pytest.mark.parametrize(
    ("options", "max_concurrency", "no_catchup"),
    [
        pytest.param([], 1, False, id="defaults"),
        pytest.param(["--max-concurrency", "3", "--no-catchup"], 3, True, id="concurrency-no-catchup"),
    ],
)
def test_schedule_create(
    fake: FakeKFP,
    when: list[str],
    trigger: dict[str, Any],
    options: list[str],
    max_concurrency: int,
    no_catchup: bool,
) -> None:
    assert (
        kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *when, *options, "--param", "epochs=3") == 0
    )

    body = only(fake.calls("POST", "/recurringruns")).body
    assert body["display_name"] == "pytorch-digits schedule"
    assert body["trigger"] == trigger
    assert int(body["max_concurrency"]) == max_concurrency
    assert body["no_catchup"] is no_catchup
    assert body["mode"] == "ENABLE"
    assert body["runtime_config"]["parameters"] == {"epochs": 3}
    (version,) = fake.versions.values()
    assert body["pipeline_version_reference"]["pipeline_version_id"] == version["pipeline_version_id"]
    assert {r.headers.get("authorization") for r in fake.requests} == {f"Bearer {TOKEN}"}


def test_schedule_create_with_a_window_disabled(fake: FakeKFP) -> None:
    argv = ["--cron", "0 30 2 * * *", "--start", "2096-01-01T00:00:00Z", "--end", "2096-06-30T12:00:00+02:00"]
    assert kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *argv, "--disabled", "--name", "n") == 0
    body = only(fake.calls("POST", "/recurringruns")).body
    assert body["trigger"]["cron_schedule"] == {
        "cron": "0 30 2 * * *",
        "start_time": "2096-01-01T00:00:00Z",
        "end_time": "2096-06-30T10:00:00Z",
    }
    assert body["mode"] == "DISABLE"
    assert body["display_name"] == "n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--cron", "0 3 * * *"], r"6 fields.*got 5.*'0 0 3 \* \* \*'", id="five-fields"),
        pytest.param(["--cron", "0 0 0 3 * * *"], "6 fields.*got 7", id="seven-fields"),
        pytest.param(["--cron", "60 0 3 * * *"], "second field: 60 is outside 0-59", id="second-range"),
        pytest.param(["--cron", "0 0 24 * * *"], "hour field: 24 is outside 0-23", id="hour-range"),
        pytest.param(["--cron", "0 0 3 0 * *"], "day-of-month field: 0 is outside 1-31", id="dom-range"),
        pytest.param(["--cron", "0 0 3 * 13 *"], "month field: 13 is outside 1-12", id="month-range"),
        pytest.param(["--cron", "0 0 3 * * FUNDAY"], "day-of-week field: 'FUNDAY'", id="bad-name"),
        pytest.param(["--cron", "0 0 3 * * 1#2"], "cannot parse '1#2'", id="bad-char"),
        pytest.param(["--cron", "0 */0 * * * *"], "step must be > 0", id="zero-step"),
        pytest.param(["--cron", "0 0 17-9 * * *"], "backwards", id="backwards-range"),
        pytest.param(["--cron", "@daily"], "6 fields.*got 1", id="descriptor"),
        pytest.param(["--interval-seconds", "60", "--max-concurrency", "0"], "1 to 10", id="concurrency-0"),
        pytest.param(["--interval-seconds", "60", "--max-concurrency", "11"], "1 to 10", id="concurrency-11"),
        pytest.param(["--interval-seconds", "60", "--start", "tomorrow"], "RFC 3339", id="bad-start"),
        pytest.param(
            ["--interval-seconds", "60", "--start", "2026-02-01T00:00:00Z", "--end", "2026-01-01T00:00:00Z"],
            "not after --start",
            id="end-before-start",
        ),
        pytest.param(["--interval-seconds", "60", "--param", "nope=1"], "unknown parameter", id="unknown-param"),
    ],
)
def test_schedule_rejects_bad_input_before_any_request(fake: FakeKFP, argv: list[str], message: str) -> None:
    with pytest.raises(KftrainError, match=message):
        kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *argv)
    assert fake.requests == []


def test_schedule_needs_exactly_one_trigger(fake: FakeKFP) -> None:
    for argv in ([], ["--cron", "0 0 3 * * *", "--interval-seconds", "5"]):
        with pytest.raises(SystemExit):
            kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *argv)
    assert fake.requests == []


@pytest.mark.parametrize(
    "cron",
    ["0 0 3 * * *", "*/30 * * * * *", "0 0 9 ? * 2-6", "0 0 0 1 JAN,jul *", "0 5,35 8-18/2 1-15 * SUN", "0 0 12 L * *"],
)
def test_validate_cron_accepts_kfp_expressions(cron: str) -> None:
    if "L" in cron.split()[3]:  # robfig/cron has no L: rejected with the field named
        with pytest.raises(KftrainError, match="day-of-month field"):
            validate_cron(cron)
        return
    assert validate_cron(f"  {cron} ") == cron


def test_schedule_refuses_a_duplicate_name(fake: FakeKFP) -> None:
    base = ["schedule", "create", "pytorch-digits", *server_args(fake), "--interval-seconds", "60"]
    assert kftrain(*base) == 0
    uploads = len(fake.calls("POST", "/pipelines/upload.*"))
    with pytest.raises(KftrainError, match="already exists"):
        kftrain(*base)
    assert len(fake.recurring_runs) == 1
    assert len(fake.calls("POST", "/pipelines/upload.*")) == uploads  # refused before uploading anything


def _schedule(fake: FakeKFP, name: str) -> str:
    assert (
        kftrain("schedule", "create", "pytorch-digits", *server_args(fake), "--cron", "0 0 1 * * *", "--name", name)
        == 0
    )
    return next(r["recurring_run_id"] for r in fake.recurring_runs.values() if r["display_name"] == name)


@pytest.mark.parametrize("by", ["name", "id"])
@pytest.mark.parametrize(("action", "status"), [("disable", "DISABLED"), ("enable", "ENABLED"), ("delete", None)])
def test_schedule_enable_disable_delete(
    fake: FakeKFP, capsys: pytest.CaptureFixture, by: str, action: str, status: str | None
) -> None:
    for other in ("a", "b"):  # more than a page of recurring runs
        _schedule(fake, other)
    rid = _schedule(fake, "nightly")
    if action == "enable":
        fake.recurring_runs[rid].update(mode="DISABLE", status="DISABLED")

    assert kftrain("schedule", action, "nightly" if by == "name" else rid, *server_args(fake)) == 0

    only(
        fake.calls(
            "DELETE" if action == "delete" else "POST",
            f"/recurringruns/{rid}" + ("" if action == "delete" else f":{action}"),
        )
    )
    if status is None:
        assert rid not in fake.recurring_runs
    else:
        assert fake.recurring_runs[rid]["status"] == status
    assert f"recurring run 'nightly' ({rid})" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        pytest.param("nope", "no recurring run named 'nope'", id="unknown-name"),
        pytest.param("twin", "2 recurring runs are named 'twin'", id="ambiguous-name"),
        pytest.param("00000000-0000-0000-0000-000000000000", "HTTP 404", id="unknown-id"),
    ],
)
def test_schedule_change_errors(fake: FakeKFP, ref: str, message: str) -> None:
    _schedule(fake, "twin")
    _schedule(fake, "other")
    (rid,) = [k for k, v in fake.recurring_runs.items() if v["display_name"] == "twin"]
    twin = dict(fake.recurring_runs[rid], recurring_run_id="11111111-1111-1111-1111-111111111111")
    fake.recurring_runs[twin["recurring_run_id"]] = twin
    with pytest.raises(KftrainError, match=message):
        kftrain("schedule", "delete", ref, *server_args(fake))
    assert len(fake.recurring_runs) == 3


def test_schedule_list(fake: FakeKFP, capsys: pytest.CaptureFixture) -> None:
    assert kftrain("schedule", "list", *server_args(fake)) == 0
    assert "no recurring runs" in capsys.readouterr().out

    daily = _schedule(fake, "daily")
    argv = ["--interval-seconds", "600", "--name", "often", "--max-concurrency", "2", "--no-catchup"]
    assert kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *argv, "--disabled") == 0
    _schedule(fake, "third")  # three: more than one page
    capsys.readouterr()

    assert kftrain("schedule", "list", *server_args(fake)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "TRIGGER", "MAX", "CATCH-UP"]
    rows = {line.split()[1]: line.split() for line in lines[1:]}
    assert set(rows) == {"daily", "often", "third"}
    assert any(r.query.get("page_token") == "2" for r in fake.calls("GET", "/recurringruns"))  # paged
    assert rows["daily"] == [daily, "daily", "enabled", "cron", "0", "0", "1", "*", "*", "*", "1", "on"]
    assert rows["often"][2:] == ["disabled", "every", "600s", "2", "off"]


def test_schedule_list_by_experiment(fake: FakeKFP, capsys: pytest.CaptureFixture) -> None:
    _schedule(fake, "in-default")
    argv = ["--interval-seconds", "60", "--name", "elsewhere", "--experiment", "other"]
    assert kftrain("schedule", "create", "pytorch-digits", *server_args(fake), *argv) == 0
    capsys.readouterr()
    assert kftrain("schedule", "list", *server_args(fake), "--experiment", "other") == 0
    out = capsys.readouterr().out
    assert "elsewhere" in out and "in-default" not in out
    with pytest.raises(KftrainError, match="No experiment is found"):
        kftrain("schedule", "list", *server_args(fake), "--experiment", "missing")


# --- helpers ----------------------------------------------------------------------------------------


def test_version_name_is_package_version_and_git_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        assert git_sha(ROOT) == head.stdout.strip()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_sha(tmp_path) == "nogit"
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert git_sha(ROOT) == "nogit"
    package = PipelinePackage(path=tmp_path / "p.yaml", name="p", parameters=None)
    assert default_version_name(package) == f"{__version__}-nogit"


def test_resolve_package_reads_name_and_parameters() -> None:
    package = resolve_package("pytorch-digits")
    assert package.path.resolve() == DIGITS_YAML.resolve()
    assert package.name == "pytorch-digits"
    spec = next(yaml.safe_load_all(DIGITS_YAML.read_text()))
    assert package.parameters == set(spec["root"]["inputDefinitions"]["parameters"])
    assert {"epochs", "workers", "learning_rate"} <= package.parameters


def test_resolve_package_rejects_a_file_that_is_not_a_pipeline(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a mapping\n")
    with pytest.raises(KftrainError, match="not a compiled KFP pipeline"):
        resolve_package(str(bad))


def test_parse_params_json_or_text() -> None:
    assert parse_params(["a=1", "b=1.5", "c=true", "d=[1, 2]", 'e={"k": 1}', "f=text", "g=", "h=a=b"]) == {
        "a": 1,
        "b": 1.5,
        "c": True,
        "d": [1, 2],
        "e": {"k": 1},
        "f": "text",
        "g": "",
        "h": "a=b",
    }


def test_params_file_under_the_command_line(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("source: data/\ncommand: [python, train.py]\nepochs: 3\n")
    expected = {"source": "data/", "command": ["python", "train.py"], "epochs": 5}
    assert parse_params(["epochs=5"], str(params)) == expected
    params.write_text("- a list\n")
    with pytest.raises(KftrainError, match=r"--params-file .*params.yaml: expected a mapping"):
        parse_params([], str(params))
    with pytest.raises(KftrainError, match=r"--params-file .*absent.yaml: cannot read parameters file: No such file"):
        parse_params([], str(tmp_path / "absent.yaml"))

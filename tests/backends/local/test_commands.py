"""What a local replica runs and what ``kftrain launch --local`` refuses: --command overrides per replica type,
and every bad command line, manifest or program refused with one line naming the flag or field (exit code 2)
before any replica process starts; a refused or suspended job leaves no work folder."""

from __future__ import annotations

import os
import shlex
import tempfile
import time
from pathlib import Path

import pytest

from kftrain.backends.local import ALL_REPLICA_TYPES, LocalBackend, parse_command_overrides
from kftrain.cli.app import main
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from testbed.local_harness import DUMP, PY, assert_ok, children, dumps, options, pod_env, program, rep
from testbed.manifests import as_yaml, pytorchjob, replica, tfjob

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["python t.py"], {ALL_REPLICA_TYPES: ["python", "t.py"]}),
        (["Worker=python w.py --x 1"], {"Worker": ["python", "w.py", "--x", "1"]}),
        (["PS=python ps.py", "python all.py"], {"PS": ["python", "ps.py"], "*": ["python", "all.py"]}),
        (["python -c 'a=1; print(a)'"], {"*": ["python", "-c", "a=1; print(a)"]}),
        (["--opt=1 run"], {"*": ["--opt=1", "run"]}),
        (["Worker='python' \"w x.py\""], {"Worker": ["python", "w x.py"]}),
        (["Chief=a", "Chief=b"], {"Chief": ["b"]}),
        ([], {}),
    ],
)
def test_parse_command_overrides(values, expected):
    assert parse_command_overrides(values) == expected


def test_command_overrides_per_type_and_default(tmp_path, out_dir):
    dump = program(tmp_path, "dump", DUMP)
    env = pod_env(out_dir, 2)
    m = tfjob({"Chief": rep(1, "tensorflow", None, env), "Worker": rep(1, "tensorflow", None, env)}, name="ov")
    commands = parse_command_overrides([shlex.join([*dump, "--default"]), "Worker=" + shlex.join([*dump, "--worker"])])
    opts = options(tmp_path, commands=commands)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    seen = dumps(out_dir)
    assert {pod: d["argv"] for pod, d in seen.items()} == {"ov-chief-0": ["--default"], "ov-worker-0": ["--worker"]}


@pytest.mark.parametrize(
    ("worker_command", "fragment"),
    [
        (None, "missing: locally the image's entrypoint is not available"),
        (["kftrain-no-such-program-xyz"], "not found on PATH"),
    ],
)
def test_bad_command_fails_before_any_process_starts(tmp_path, out_dir, worker_command, fragment):
    before = children()
    marker = out_dir / "chief-started"
    chief = [PY, "-c", f"open({str(marker)!r}, 'w').close()"]
    m = tfjob({"Chief": rep(1, "tensorflow", chief, []), "Worker": rep(1, "tensorflow", worker_command, [])})
    with pytest.raises(JobSpecError) as exc:
        LocalBackend(options(tmp_path)).submit(load_manifest(m))
    assert exc.value.field == "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].command"
    assert fragment in exc.value.message
    assert children() - before == set()
    time.sleep(0.2)
    assert not marker.exists()


def test_rejected_submit_leaves_no_temp_workdir(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    m = tfjob({"Worker": rep(1, "tensorflow", None, [])})
    with pytest.raises(JobSpecError):
        LocalBackend(options(tmp_path, workdir=None)).submit(load_manifest(m))
    assert list(temp.iterdir()) == []


def test_suspended_job_is_not_started(tmp_path):
    m = tfjob({"Worker": rep(1, "tensorflow", [PY, "-c", "pass"], [])}, runPolicy={"suspend": True})
    with pytest.raises(JobSpecError) as exc:
        LocalBackend(options(tmp_path)).submit(load_manifest(m))
    assert exc.value.field == "spec.runPolicy.suspend"


def test_owned_workdir_removed_on_success(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    m = tfjob({"Worker": rep(1, "tensorflow", [PY, "-c", "print('ok')"], [])})
    opts = options(tmp_path, workdir=None)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    assert list(temp.iterdir()) == []


def _write(tmp_path: Path, manifest: dict) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(as_yaml(manifest))
    return str(path)


def _worker_env(env: list[dict]) -> dict:
    return tfjob({"Worker": replica(1, "tensorflow", [PY, "-c", "pass"], env=env)}, name="env")


UNBALANCED = "python -c 'print(1)"  # a quote never closed
MISSING = "no-such-program-xyz"
# (id, manifest, extra args, fragment of the one-line message); a large manifest is made when its test runs (a
# function), not when the module is collected.
CASES = [
    ("timeout-nan", None, ["--timeout", "nan"], "argument --timeout: 'nan': expected a finite number of seconds"),
    ("timeout-inf", None, ["--timeout", "inf"], "argument --timeout: 'inf': expected a finite number"),
    ("timeout-negative", None, ["--timeout", "-5"], "argument --timeout: '-5': expected a finite number"),
    ("timeout-text", None, ["--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds"),
    ("max-replicas-zero", None, ["--max-local-replicas", "0"], "argument --max-local-replicas: '0': expected"),
    ("command-unbalanced", None, ["--command", UNBALANCED], f'--command: "{UNBALANCED}": no closing quotation'),
    ("command-empty", None, ["--command", "  "], "--command: '  ': no program to run"),
    ("command-per-type-empty", None, ["--command", "Worker="], "--command: 'Worker=': no program to run"),
    ("program-missing", None, ["--command", f"{MISSING} --flag"], f"program '{MISSING}' not found on PATH"),
    ("program-not-executable", None, ["--command", "{not_executable}"], "is not executable"),
    ("program-is-a-folder", None, ["--command", "{folder}"], "is a folder, not a program"),
    ("workdir-under-a-file", None, ["--workdir", "{not_executable}/wd"], "Not a directory"),
    (
        "150-replicas",
        pytorchjob(
            {"Master": replica(1, "pytorch", [PY, "-c", "pass"]), "Worker": replica(150, "pytorch", [PY, "-c", "pass"])}
        ),
        [],
        "spec.pytorchReplicaSpecs.Worker.replicas: 150 (151 replicas in the job): locally every replica is a process",
    ),
    (
        "20k-env-vars-E2BIG",
        lambda: _worker_env([{"name": f"V{i}", "value": "x" * 100} for i in range(20_000)]),
        [],
        "containers[tensorflow].env: the program's arguments and environment (2",
    ),
    (
        "one-huge-variable",
        lambda: _worker_env([{"name": "BIG", "value": "x" * 200_000}]),
        [],
        "containers[tensorflow].env[BIG]: 200005 bytes: more than the 131072 bytes",
    ),
    (
        "var-reference-bomb",
        lambda: _worker_env(
            [{"name": "A0", "value": "x" * 1000}]
            + [{"name": f"A{i}", "value": f"$(A{i - 1})" * 50} for i in range(1, 6)]
        ),
        [],
        "containers[tensorflow].env[2].value: A2: expands to more than 131072 characters",
    ),
    (
        "generate-name-bad",
        {**tfjob({"Worker": replica(1, "tensorflow", [PY, "-c", "pass"])}), "metadata": {"generateName": "X-"}},
        [],
        "metadata.generateName: 'X-' must be",
    ),
]


@pytest.mark.usefixtures("no_process_started")
@pytest.mark.parametrize(("manifest", "args", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_launch_is_one_line_exit_2_and_starts_nothing(manifest, args, fragment, tmp_path, capsys):
    not_executable = tmp_path / "train.py"
    not_executable.write_text("print('hi')\n")
    not_executable.chmod(0o644)
    paths = {"not_executable": not_executable, "folder": tmp_path}
    if callable(manifest):
        manifest = manifest()
    job = _write(tmp_path, manifest or tfjob({"Worker": replica(1, "tensorflow", [PY, "-c", "pass"])}))
    argv = ["launch", "--local", "-f", job, *[a.format(**paths) for a in args]]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a bad flag value itself: usage line, then the error line
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.splitlines()
    error = [line for line in lines if "error:" in line]
    assert len(error) == 1, err
    assert fragment in error[0], error[0]
    assert len(error[0]) < 600
    assert not any(line.startswith("[worker") or "starting" in line for line in out.splitlines()), out


@pytest.mark.usefixtures("no_process_started")
def test_generate_name_gets_a_name_locally(tmp_path, capsys):
    manifest = {**tfjob({"Worker": replica(1, "tensorflow", [PY, "-c", "import os; print(os.getcwd())"])})}
    manifest["metadata"] = {"generateName": "digits-"}
    code = main(["launch", "--local", "-f", _write(tmp_path, manifest), "--workdir", str(tmp_path / "wd")])
    out, _ = capsys.readouterr()
    assert code == 0, out
    started = next(line for line in out.splitlines() if "starting TFJob" in line)
    name = started.split("starting TFJob ", 1)[1].split(":", 1)[0]
    assert name.startswith("digits-") and len(name) == len("digits-") + 5, started
    assert os.path.isfile(tmp_path / "wd" / "logs" / "worker-0.log")

"""Bad command lines and manifests that only fail when run: ``kftrain launch --local`` refuses each one
with one line naming the flag or field, exit code 2, before any replica process starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from kftrain.cli.app import main
from tests.conftest import pytorchjob, replica, tfjob

PY = sys.executable


@pytest.fixture(autouse=True)
def no_process_started():
    """Nothing these cases do may leave (or even start) a process."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    after = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert after == [], f"processes started: {after}"


def _write(tmp_path: Path, manifest: dict) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return str(path)


def _worker_env(env: list[dict]) -> dict:
    return tfjob({"Worker": replica(1, "tensorflow", [PY, "-c", "pass"], env=env)}, name="env")


# (id, manifest, extra args, fragment of the one-line message)
CASES = [
    ("timeout-nan", None, ["--timeout", "nan"], "argument --timeout: 'nan': expected a finite number of seconds"),
    ("timeout-inf", None, ["--timeout", "inf"], "argument --timeout: 'inf': expected a finite number"),
    ("timeout-negative", None, ["--timeout", "-5"], "argument --timeout: '-5': expected a finite number"),
    ("timeout-text", None, ["--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds"),
    ("max-replicas-zero", None, ["--max-local-replicas", "0"], "argument --max-local-replicas: '0': expected"),
    (
        "command-unbalanced",
        None,
        ["--command", "python -c 'print(1)"],
        '--command: "python -c \'print(1)": no closing quotation',
    ),
    ("command-empty", None, ["--command", "  "], "--command: '  ': no program to run"),
    ("command-per-type-empty", None, ["--command", "Worker="], "--command: 'Worker=': no program to run"),
    (
        "program-missing",
        None,
        ["--command", "no-such-program-xyz --flag"],
        "program 'no-such-program-xyz' not found on PATH",
    ),
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
        _worker_env([{"name": f"V{i}", "value": "x" * 100} for i in range(20_000)]),
        [],
        "containers[tensorflow].env: the program's arguments and environment (2",
    ),
    (
        "one-huge-variable",
        _worker_env([{"name": "BIG", "value": "x" * 200_000}]),
        [],
        "containers[tensorflow].env[BIG]: 200005 bytes: more than the 131072 bytes",
    ),
    (
        "var-reference-bomb",
        _worker_env(
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


@pytest.mark.parametrize(("manifest", "args", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_launch_is_one_line_exit_2_and_starts_nothing(manifest, args, fragment, tmp_path, capsys):
    not_executable = tmp_path / "train.py"
    not_executable.write_text("print('hi')\n")
    not_executable.chmod(0o644)
    paths = {"not_executable": not_executable, "folder": tmp_path}
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

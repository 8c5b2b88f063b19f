"""``kftrain run`` as a user runs it (the ``kftrain`` command, its own process) when the pipeline fails: the failed
step's own error first, KFP's ``executor_input`` dump only with ``--verbose``, one line naming the failed task and
exit code 1, never a traceback of kftrain's; every path it prints exists once it has returned; nothing of the run
left in the temporary folder, whether it failed early or late; a user's module named like a standard one
(``token.py``) beside the pipeline breaks neither kftrain nor the steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.backends.local.state import STATE_DIR_ENV

# What a run leaves in the temporary folder when it does not clean up (KFP's workspace, the run's own folder).
LEFT_BEHIND = ("kfp-workspace-", "kftrain-run-")

FAILING_JOB = """
from kfp import dsl
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch

@dsl.pipeline(name="failing-job")
def failing_job() -> None:
    pytorchjob_launch(command=["python", "train.py"], workers=1, shm_size="", restart_policy="Never", backoff_limit=0)
"""
FAILING_TRAIN = 'print("about to fail", flush=True)\nraise SystemExit("boom in train")\n'
FAILING_STEP = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def mine(a: int) -> int:
    raise ValueError(f"my step refused {a}")

@dsl.pipeline(name="failing-step")
def failing_step(a: int = 1) -> None:
    mine(a=a)
"""
ADDER = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def add(a: int, b: int) -> int:
    return a + b

@dsl.pipeline(name="adder")
def adder(a: int = 1, b: int = 2) -> None:
    add(a=a, b=b)
"""


class User:
    """A user's folder, where they run ``kftrain``, with a temporary folder and a job state folder of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "project"
        self.tmp = tmp_path / "tmp"
        self.state = tmp_path / "state"
        for folder in (self.folder, self.tmp):
            folder.mkdir()

    def write(self, **files: str) -> None:
        for name, text in files.items():
            (self.folder / name).write_text(textwrap.dedent(text))

    def kftrain(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        script = Path(sys.executable).with_name("kftrain")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "kftrain.cli"]
        env = {**os.environ, "TMPDIR": str(self.tmp), STATE_DIR_ENV: str(self.state)}
        return subprocess.run(
            [*command, *args], cwd=self.folder, capture_output=True, text=True, timeout=timeout, env=env
        )

    def left_behind(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir() if p.name.startswith(LEFT_BEHIND))


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


def assert_failed_in(proc: subprocess.CompletedProcess[str], task: str) -> None:
    """Exit code 1, and kftrain's own error is one line naming the failed task, no traceback."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("[kftrain] pipeline "), proc.stderr
    assert f"failed: task {task} failed" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "RuntimeError" not in proc.stderr, proc.stderr


def printed_paths_exist(user: User, output: str) -> None:
    """Every path under the user's folders the run printed exists after it returned."""
    for path in re.findall(rf"{re.escape(str(user.folder.parent))}[^\s'\",)]*", output):
        assert Path(path.rstrip(".:")).exists(), f"printed but gone: {path}"


def test_a_failed_step_shows_its_error_line_first(user: User) -> None:
    proc = user.kftrain("run", "train-evaluate-export", "--param", "source=nope.csv", "--pipeline-root", "runs")
    assert_failed_in(proc, "prepare-dataset")
    assert proc.stdout.splitlines()[:3] == [
        "[kftrain] prepare-dataset: started",
        proc.stdout.splitlines()[1],
        "    ERROR: source 'nope.csv': not found",
    ]
    assert proc.stdout.splitlines()[1].startswith("[kftrain] prepare-dataset: FAILURE after ")
    assert "executor_input" not in proc.stdout and "Traceback" not in proc.stdout
    assert "(kftrain run --verbose shows the step's whole log)" in proc.stderr
    assert user.left_behind() == []


def test_a_failed_job_names_its_replica_logs_and_prints_no_path_that_goes(user: User) -> None:
    user.write(**{"failing.py": FAILING_JOB, "train.py": FAILING_TRAIN})
    proc = user.kftrain("run", "failing:failing_job", "--pipeline-root", str(user.folder / "runs"))
    assert_failed_in(proc, "pytorchjob-launch")
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("[kftrain] pytorchjob-launch: FAILURE after ")
    assert lines[2].startswith("    ERROR: job Failed"), proc.stdout
    assert "boom in train" in proc.stdout
    (job,) = re.findall(r"kftrain jobs logs (\S+)", proc.stderr)
    assert f"[kftrain]   the job's replica logs: kftrain jobs logs {job}" in lines
    printed_paths_exist(user, proc.stdout + proc.stderr)
    assert user.left_behind() == []

    # The logs it names are there once the run is over, and a replica the job does not have is named so.
    logs = user.kftrain("jobs", "logs", job)
    assert logs.returncode == 0 and "boom in train" in logs.stdout, logs.stderr
    wrong = user.kftrain("jobs", "logs", job, "--replica", "node-0")
    assert wrong.returncode == 2
    assert f"job {job} has no replica 'node-0'; its replicas: master-0, worker-0" in wrong.stderr

    verbose = user.kftrain("run", "failing:failing_job", "--pipeline-root", str(user.folder / "runs"), "--verbose")
    assert_failed_in(verbose, "pytorchjob-launch")
    assert "executor_input" in verbose.stdout and "kftrain jobs logs " in verbose.stderr
    assert "kftrain-run-" not in verbose.stdout + verbose.stderr, "a path of the run's temporary folder is printed"
    # kftrain's own lines (not KFP's executor_input, which names outputs the failed step never wrote)
    said = [line for line in (verbose.stdout + verbose.stderr).splitlines() if "[kftrain]" in line]
    printed_paths_exist(user, "\n".join(said))
    assert user.left_behind() == []


def test_a_step_of_the_users_that_raises_shows_its_error(user: User) -> None:
    user.write(**{"steps.py": FAILING_STEP})
    proc = user.kftrain("run", "steps:failing_step", "--param", "a=7", "--pipeline-root", "runs")
    assert_failed_in(proc, "mine")
    assert "ValueError: my step refused 7" in proc.stdout
    assert "executor_input" not in proc.stdout
    assert user.left_behind() == []


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["nothing_here:p"], id="no-such-module"),
        pytest.param(["adder:adder", "--param", "c=1"], id="unknown-parameter"),
        pytest.param(["adder:nothing"], id="no-such-pipeline"),
    ],
)
def test_a_run_that_fails_before_it_starts_leaves_nothing(user: User, args: list[str]) -> None:
    user.write(**{"adder.py": ADDER})
    proc = user.kftrain("run", *args, "--pipeline-root", "runs")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert user.left_behind() == []
    assert not (user.folder / "runs").exists()


def test_a_token_py_beside_the_pipeline_breaks_neither_kftrain_nor_its_steps(user: User) -> None:
    """Python's ``-m`` puts the current folder first on a step's path; the user's token.py must not replace the
    standard library's there (its ``tokenize`` imports it, and so does every traceback)."""
    user.write(**{"token.py": "raise RuntimeError('the user token.py was imported')\n", "adder.py": ADDER})
    proc = user.kftrain("run", "adder:adder", "--param", "a=3", "--pipeline-root", "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[kftrain] add: finished in " in proc.stdout and "(Output=5)" in proc.stdout
    assert user.left_behind() == []


def test_a_compiled_pipeline_file_runs_as_its_module_does(user: User) -> None:
    """The one resolver of a pipeline reference: what ``kftrain compile`` wrote, ``kftrain run`` runs."""
    user.write(**{"adder.py": ADDER})
    compiled = user.kftrain("compile", "adder:adder", "-o", "adder.yaml")
    assert compiled.returncode == 0, compiled.stderr
    proc = user.kftrain("run", "adder.yaml", "--param", "a=5", "--pipeline-root", "runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[kftrain] add: finished in " in proc.stdout and "(Output=7)" in proc.stdout
    assert user.left_behind() == []

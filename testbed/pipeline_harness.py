"""Run a whole pipeline with KFP's local runner, as `make run` does, for the end-to-end tests; and the stub trainer
that the tests of a pipeline's wiring (not its training) run in place of the real program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import REPO_ROOT

# A training program that writes a valid model in a few seconds (see its docstring).
STUB_TRAINER = REPO_ROOT / "testbed" / "programs" / "stub_trainer.py"
STUB_LLM_TRAINER = REPO_ROOT / "testbed" / "programs" / "stub_llm_trainer.py"


def stub_trainer(framework: str, *args: str) -> list[str]:
    """The command that runs the stub trainer, writing a model of ``framework`` (pytorch: a kftrain MLP,
    tensorflow: a SavedModel) in this release's format; ``args``: e.g. ``--epochs 12``, the epochs it reports."""
    return ["python", str(STUB_TRAINER), "--framework", framework, *args]


def stub_llm_trainer(*args: str) -> list[str]:
    """The command that runs the fine-tuning program's stand-in: an untrained tiny Llama in its layout."""
    return ["python", str(STUB_LLM_TRAINER), *args]


@dataclass
class PipelineRun:
    run_dir: Path  # <pipeline root>/<run>: one folder per step, each with KFP's executor_output.json
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        return self.stdout + self.stderr


def run_pipeline(
    name: str, root: Path, *args: str, timeout: int, cwd: Path | None = None, verbose: bool = True
) -> PipelineRun:
    """``kftrain run NAME --pipeline-root ROOT ARGS...``; fails the test with the output's tail unless it succeeds.

    ``verbose``: the whole output (every step's log), which the tests read; else two lines per step."""
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "run", name, "--pipeline-root", str(root), *args]
        + (["--verbose"] if verbose else []),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return PipelineRun(run_dir, proc.stdout, proc.stderr)


def shared_run(name: str, *args: str, timeout: int) -> Any:
    """A module-scoped ``pipeline_run`` fixture: (run folder, whole log) of one run of ``name``, for a file's tests."""

    @pytest.fixture(scope="module")
    def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
        run = run_pipeline(name, tmp_path_factory.mktemp("runs"), *args, timeout=timeout)
        return run.run_dir, run.log

    return pipeline_run


def step(run_dir: Path, name: str) -> Path:
    """The folder of the step ``name`` that ran: in a branch of a pipeline, KFP suffixes its tasks (``name-2``)."""
    ran = [
        p for p in run_dir.iterdir() if p.name.rstrip("-0123456789") == name and (p / "executor_output.json").exists()
    ]
    assert len(ran) == 1, (name, sorted(p.name for p in run_dir.iterdir()))
    return ran[0]


def executor_output(step_dir: Path) -> dict[str, Any]:
    """What KFP recorded for one step: its output artifacts (URIs, metadata) and parameters."""
    result: dict[str, Any] = json.loads((step_dir / "executor_output.json").read_text())
    return result


SHIPPED_STEPS = ("prepare-dataset", "trainer-args", "evaluate-model", "export-model")


def assert_steps_ran(run_dir: Path, launch_step: str) -> None:
    """Every step of a shipped pipeline wrote its executor output: prep, flags, launch, evaluation, export."""
    for step in (*SHIPPED_STEPS, launch_step):
        assert (run_dir / step / "executor_output.json").exists(), step


def accuracy_passed(run_dir: Path) -> float:
    """The test accuracy the evaluation step reported; the quality gate must have passed on it."""
    out = executor_output(run_dir / "evaluate-model")
    assert out["parameterValues"]["passed"] is True, out["parameterValues"]
    accuracy: float = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]["accuracy"]
    return accuracy


def model_metadata(run_dir: Path, launch_step: str) -> dict[str, Any]:
    """What the launch step recorded on its Model output."""
    meta: dict[str, Any] = executor_output(run_dir / launch_step)["artifacts"]["model"]["artifacts"][0]["metadata"]
    return meta


def assert_launched(run_dir: Path, launch_step: str, kind: str) -> dict[str, Any]:
    """Every step ran and ``launch_step`` submitted a job of ``kind``; what it recorded on its Model output."""
    assert_steps_ran(run_dir, launch_step)
    assert json.loads((run_dir / launch_step / "job").read_text())["kind"] == kind
    return model_metadata(run_dir, launch_step)

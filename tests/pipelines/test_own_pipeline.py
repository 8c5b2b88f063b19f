"""The README's "Your own pipeline, locally" example (examples/own_pipeline) runs as the README says, from its
folder with ``kftrain run my_pipeline:my_pipeline``: the module is found in the current folder as ``python -m``
finds one, and what cannot be found is one line naming it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import REPO_ROOT

REPO = REPO_ROOT
EXAMPLE = REPO / "examples" / "own_pipeline"


def kftrain(*args: str, cwd: Path, timeout: float = 120, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The ``kftrain`` command as a user runs it: its script's folder, not the current one, starts its path."""
    script = Path(sys.executable).with_name("kftrain")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kftrain.cli"]
    env = {**os.environ, **({"TMPDIR": str(tmp)} if tmp else {})}
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_the_readme_example_runs_from_its_folder(tmp_path: Path) -> None:
    proc = kftrain(
        "run", "my_pipeline:my_pipeline", "--pipeline-root", str(tmp_path / "runs"), cwd=EXAMPLE, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[kftrain] describe-model: finished" in proc.stdout
    assert "pipeline my_pipeline:my_pipeline succeeded" in proc.stdout
    (model,) = (tmp_path / "runs").glob("my-pipeline-*/pytorchjob-launch/model")
    assert (model / "model.pt").is_file()
    assert not (EXAMPLE / "runs").exists()


@pytest.mark.parametrize(
    ("pipeline", "cwd", "message"),
    [
        ("my_pipeline:my_pipeline", REPO, "no module named 'my_pipeline' in the current folder"),
        ("my_pipeline:nothing", EXAMPLE, "has no 'nothing'"),
        ("my_pipeline:describe_model", EXAMPLE, "not a pipeline"),
        ("no_such_module:pipe", EXAMPLE, "no module named 'no_such_module'"),
    ],
)
def test_a_pipeline_that_cannot_be_loaded_is_one_line_naming_it(pipeline: str, cwd: Path, message: str) -> None:
    proc = kftrain("run", pipeline, "--pipeline-root", "/nonexistent/never-written", cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

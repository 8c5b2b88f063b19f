"""The Makefile's installs: ``make run`` installs what the chosen pipeline needs, ``make test``/``test-all`` the
rest (checked with ``make -n``: what make would run for a venv that does not exist yet)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testbed.reference import REPO

FOR_THE_TESTS = ["install_mpi.sh", "install_chromium.sh", "build_horovod.sh", "install_mlflow_server.sh"]


def planned(tmp_path: Path, *args: str) -> str:
    """What ``make -n ARGS`` would run with the venv in an empty folder."""
    done = subprocess.run(
        ["make", "-n", *args, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def extras(plan: str) -> set[str]:
    found = re.findall(r"-e '\.\[([a-z0-9,]+)\]'", plan)
    assert len(found) == 1, plan
    return set(found[0].split(","))


def test_make_run_installs_only_what_the_pytorch_pipeline_needs(tmp_path: Path) -> None:
    plan = planned(tmp_path, "run")
    assert [script for script in FOR_THE_TESTS if script in plan] == []
    assert extras(plan) == {"data", "samples", "torch", "onnx", "s3", "mlflow"}
    assert "kftrain run pytorch-digits " in plan


@pytest.mark.parametrize(
    "args", [("test-all",), ("test",), ("run", "PIPELINE=tf-digits"), ("run", "STORAGE=s3")], ids=" ".join
)
def test_the_tests_and_any_other_run_get_the_whole_install(tmp_path: Path, args: tuple[str, ...]) -> None:
    plan = planned(tmp_path, *args)
    assert [script for script in FOR_THE_TESTS if script not in plan] == []
    assert {"dev", "tf", "torch"} <= extras(plan)

"""examples/manifests/ holds one manifest per kind kftrain launches (TFJob, PyTorchJob, MPIJob, Trainer v2
TrainJob); each is valid for its operator's CRD (CEL rules included) and runs locally as its header says, from the
repository's root: ``kftrain launch -f examples/manifests/<kind>.yaml --local``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kftrain.job import load_manifest_file
from kftrain.job.kinds import KINDS
from testbed import REPO_ROOT

REPO = REPO_ROOT
FOLDER = REPO / "examples" / "manifests"
CRDS = REPO.parent / "shared" / "reference" / "crds"

# What each example's replicas print when they reached each other.
EXPECTED = {
    "pytorchjob": ["[master-0] rank 0 of 2", "sum of ranks 1"],
    "tfjob": ["[worker-0] TF_CONFIG=", "[worker-1] TF_CONFIG="],
    "mpijob": ["[launcher-0] hello from python rank 0 of 2", "[launcher-0] hello from python rank 1 of 2"],
    "trainjob": ["[node-0] rank 0 of 2", "[node-1] rank 1 of 2", "sum of ranks 1"],
}


def kftrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kftrain.cli", *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


def test_there_is_an_example_of_every_kind() -> None:
    kinds = {load_manifest_file(FOLDER / f"{name}.yaml").kind for name in EXPECTED}
    assert kinds == {kind.spec.kind for kind in KINDS}
    assert sorted(p.stem for p in FOLDER.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_is_valid_for_its_crd(name: str) -> None:
    if not CRDS.is_dir():
        pytest.skip(f"the operators' CRDs are needed: {CRDS} is missing")
    proc = kftrain("validate", "-f", f"examples/manifests/{name}.yaml", "--crd-dir", str(CRDS))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_runs_locally(name: str, tmp_path: Path) -> None:
    if name == "mpijob" and shutil.which("mpirun") is None:
        pytest.skip("mpirun missing (scripts/install_mpi.sh installs OpenMPI)")
    proc = kftrain("launch", "-f", f"examples/manifests/{name}.yaml", "--local", "--timeout", "240")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for line in EXPECTED[name]:
        assert line in proc.stdout, proc.stdout[-3000:]

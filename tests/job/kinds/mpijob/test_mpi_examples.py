"""The operators' official MPIJob examples (v1 and v2beta1): they load, validate against the CRDs, and run locally.

Their images' programs are not here, so the Launcher's command is replaced with a small program of
examples/mpi/ started by a plain ``mpirun -n 2``; everything else (slots, workers, env) is the example's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from kftrain.job import load_manifest_file, render_manifest
from kftrain.job.kinds.mpijob import hostfile as mpi_hostfile
from kftrain.job.kinds.mpijob.kind import total_slots as total_mpi_slots
from testbed import REPO_ROOT
from testbed.reference import CRD_DIR

REPO = REPO_ROOT
V1_EXAMPLE = "training-operator-v1.9.0_mpi_v1_tensorflow-mnist.yaml"
V2_EXAMPLE = "mpi-operator-v0.8.2_v2beta1_tensorflow-benchmarks.yaml"
EXAMPLES = [V1_EXAMPLE, V2_EXAMPLE]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loads_validates_and_round_trips(example_manifests, crd_schemas, name):
    job = load_manifest_file(example_manifests[name])
    rendered = render_manifest(job)
    assert crd_schemas.errors(rendered) == []
    assert job.replicas_of("Worker") == 2 and job.spec.slots_per_worker == 1
    assert total_mpi_slots(job) == 2
    assert mpi_hostfile(job, "localhost", merge_hosts=True) == "localhost slots=2\n"


@pytest.mark.slow
def test_cli_validate_accepts_both_examples(example_manifests):
    for name in EXAMPLES:
        proc = subprocess.run(
            [sys.executable, "-m", "kftrain.cli", "validate", "-f", str(example_manifests[name]), "--crd-dir",
             str(CRD_DIR)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "valid MPIJob" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh installs OpenMPI)")
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_locally_with_a_replaced_command(example_manifests, tmp_path, name):
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(example_manifests[name]), "--local",
         "--timeout", "90", "--workdir", str(tmp_path), "--command", "mpirun -n 2 python examples/mpi/hello.py"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hostfile = tmp_path / "etc" / "mpi" / "hostfile"
    for rank in (0, 1):
        assert f"[launcher-0] hello from python rank {rank} of 2" in proc.stdout
    assert f"(hostfile {hostfile})" in proc.stdout
    assert hostfile.read_text() == "localhost slots=2\n"

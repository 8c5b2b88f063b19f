"""MPIJob on the local backend: the Launcher's hostfile and env (v2beta1 and v1), and a real MPI program.

Locally only the Launcher runs; the Workers are slots in a ``localhost slots=N`` hostfile (N = workers x
slotsPerWorker, plus the Launcher's own slots with runLauncherAsWorker) named by the variable of the job's MPI
implementation, so an unmodified ``mpirun -n N prog`` starts every rank on this machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from testbed import REPO_ROOT
from testbed.launch_harness import launch_locally
from testbed.manifests import mpijob_v1, mpijob_v2, replica

REPO = REPO_ROOT
EXAMPLES = REPO / "examples" / "mpi"

# The Launcher dumps its hostfile and MPI-related env as one JSON line.
DUMP = (
    "import json, os; "
    "keys = [k for k in os.environ if k.startswith(('OMPI_', 'I_MPI_', 'HYDRA_', 'K_MPI_'))]; "
    "hf = os.environ.get('OMPI_MCA_orte_default_hostfile') or os.environ.get('I_MPI_HYDRA_HOST_FILE') "
    "or os.environ.get('HYDRA_HOST_FILE'); "
    "print('DUMP ' + json.dumps({'env': {k: os.environ[k] for k in keys}, 'hostfile': open(hf).read()}))"
)

CASES = [
    # id, api version, spec fields, workers, expected hostfile, env expected on the launcher, env that must be absent
    (
        "v2beta1-openmpi-2x1",
        "v2beta1",
        {"slotsPerWorker": 1},
        2,
        "localhost slots=2\n",
        {
            "K_MPI_JOB_ROLE": "launcher",
            "OMPI_MCA_orte_set_default_slots": "1",
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        },
        ["I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE"],
    ),
    (
        "v2beta1-openmpi-3x2",
        "v2beta1",
        {"slotsPerWorker": 2},
        3,
        "localhost slots=6\n",
        {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_set_default_slots": "2"},
        [],
    ),
    (
        "v2beta1-launcher-as-worker",
        "v2beta1",
        {"slotsPerWorker": 2, "runLauncherAsWorker": True},
        1,
        "localhost slots=4\n",
        {"K_MPI_JOB_ROLE": "launcher"},
        [],
    ),
    (
        "v2beta1-intel",
        "v2beta1",
        {"slotsPerWorker": 2, "mpiImplementation": "Intel"},
        2,
        "localhost:4\n",
        {"K_MPI_JOB_ROLE": "launcher", "I_MPI_PERHOST": "2"},
        ["OMPI_MCA_orte_default_hostfile", "HYDRA_HOST_FILE"],
    ),
    (
        "v2beta1-mpich",
        "v2beta1",
        {"slotsPerWorker": 1, "mpiImplementation": "MPICH"},
        2,
        "localhost:2\n",
        {"K_MPI_JOB_ROLE": "launcher"},
        ["OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE"],
    ),
    ("v1-2x1", "v1", {"slotsPerWorker": 1}, 2, "localhost slots=2\n", {}, ["K_MPI_JOB_ROLE"]),
    ("v1-2x2", "v1", {"slotsPerWorker": 2}, 2, "localhost slots=4\n", {}, ["K_MPI_JOB_ROLE"]),
]


def _launcher_job(version: str, spec: dict, workers: int, command: list[str]):
    build = mpijob_v2 if version == "v2beta1" else mpijob_v1
    data = build(
        {"Launcher": replica(1, "mpi", command=command), "Worker": replica(workers, "mpi")}, name="mpi-env", **spec
    )
    return load_manifest(data)


@pytest.mark.parametrize(
    ("version", "spec", "workers", "hostfile", "env", "absent"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_launcher_sees_hostfile_and_env(tmp_path, version, spec, workers, hostfile, env, absent):
    job = _launcher_job(version, spec, workers, [sys.executable, "-c", DUMP])
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(workdir=tmp_path, out=out))
    result = backend.wait(backend.submit(job), timeout=60)
    assert result.succeeded, out.getvalue()
    assert "[launcher-0] DUMP " in out.getvalue()
    assert "[worker-" not in out.getvalue(), "MPI workers only host slots locally; they run no process"
    line = next(x for x in out.getvalue().splitlines() if x.startswith("[launcher-0] DUMP "))
    seen = json.loads(line.removeprefix("[launcher-0] DUMP "))
    assert seen["hostfile"] == hostfile
    assert (tmp_path / "etc" / "mpi" / "hostfile").read_text() == hostfile
    for key, value in env.items():
        assert seen["env"].get(key) == value, key
    for key in absent:
        assert key not in seen["env"], key
    impl = spec.get("mpiImplementation", "OpenMPI")
    hostfile_var = {"OpenMPI": "OMPI_MCA_orte_default_hostfile", "Intel": "I_MPI_HYDRA_HOST_FILE"}.get(
        impl, "HYDRA_HOST_FILE"
    )
    assert seen["env"][hostfile_var] == str(tmp_path / "etc" / "mpi" / "hostfile")
    if os.geteuid() == 0:
        assert seen["env"]["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
        assert seen["env"]["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


def test_hostfile_variables_of_the_shell_do_not_leak(tmp_path, monkeypatch):
    monkeypatch.setenv("OMPI_MCA_orte_default_hostfile", "/nonexistent/hostfile")
    job = _launcher_job("v2beta1", {"slotsPerWorker": 1}, 2, [sys.executable, "-c", DUMP])
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(workdir=tmp_path, out=out))
    assert backend.wait(backend.submit(job), timeout=60).succeeded, out.getvalue()
    assert "/nonexistent/hostfile" not in out.getvalue()


# --- a real MPI program, through the CLI ---------------------------------------------------------

needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or shutil.which("mpicxx") is None,
    reason="no MPI here: mpirun/mpicxx missing (scripts/install_mpi.sh installs Debian's OpenMPI)",
)


@pytest.fixture(scope="module")
def hello_binary(tmp_path_factory) -> Path:
    if shutil.which("mpicxx") is None:
        pytest.skip("mpicxx missing (scripts/install_mpi.sh installs Debian's OpenMPI)")
    out = tmp_path_factory.mktemp("mpi") / "hello"
    subprocess.run(["mpicxx", "-O1", "-o", str(out), str(EXAMPLES / "hello.cpp")], check=True, timeout=120)
    return out


def _launch(manifest: dict, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return launch_locally(manifest, tmp_path, *extra, job_timeout=90, timeout=120)


@needs_mpi
@pytest.mark.parametrize("version", ["v2beta1", "v1"])
def test_plain_mpi_program_runs_two_ranks_through_kftrain_launch(tmp_path, hello_binary, version):
    # The user's command is a plain `mpirun -n 2 prog`: no --allow-run-as-root, no hostfile, no --oversubscribe.
    job = (mpijob_v2 if version == "v2beta1" else mpijob_v1)(
        {"Launcher": replica(1, "mpi", command=["mpirun", "-n", "2", str(hello_binary)]), "Worker": replica(2, "mpi")},
        name="hello-mpi",
        slotsPerWorker=1,
    )
    proc = _launch(job, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        assert f"[launcher-0] hello from rank {rank} of 2" in proc.stdout
    assert "[launcher-0] allreduce sum 3 (expected 3)" in proc.stdout


@needs_mpi
def test_more_ranks_than_slots_fails_as_on_a_cluster(tmp_path, hello_binary):
    job = mpijob_v2(
        {
            "Launcher": replica(1, "mpi", command=["mpirun", "-n", "3", str(hello_binary)], restart_policy="Never"),
            "Worker": replica(1, "mpi"),
        },
        name="too-many-ranks",
        slotsPerWorker=2,
    )
    proc = _launch(job, tmp_path)
    assert proc.returncode != 0
    assert "not enough slots" in (proc.stdout + proc.stderr).lower()


@needs_mpi
def test_mpirun_works_without_ssh_on_the_path(tmp_path, hello_binary):
    # Slim images and CI containers often lack ssh; OpenMPI 4 refuses to start without an rsh agent even when
    # every rank is local, so the local backend names a harmless one.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").symlink_to(shutil.which("mpirun") or "mpirun")
    job = _launcher_job("v2beta1", {"slotsPerWorker": 1}, 2, ["mpirun", "-n", "2", str(hello_binary)])
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(workdir=tmp_path / "w", out=out, extra_env={"PATH": str(bin_dir)}))
    result = backend.wait(backend.submit(job), timeout=60)
    assert result.succeeded, out.getvalue()
    assert "[launcher-0] allreduce sum 3 (expected 3)" in out.getvalue()

"""P13: a Python training function run as a job on this machine, by kftrain beside the Kubeflow SDK's local backend.

    python bench/bench_function_job.py [--repeat 3] [--only ours,peer] --json out.json

The same function on both sides (bench/programs/allreduce_function.py: join the gloo group, all-reduce one tensor,
print the sum), each tool sending its source to the job, with the same requirement (this environment's torch):

- **ours**: ``kftrain launch -f trainjob.yaml --local``, a TrainJob on the ``torch-distributed`` runtime whose
  command is ``kftrain.launch.function.function_command(allreduce_once, packages_to_install=["torch==…"],
  prefix=["torchrun", "--no-python"])``: 1 node × 1 process, timed from the command's start to its exit (kftrain's
  own start-up and imports included). A local run installs nothing: torch is this environment's.
- **peer**: the Kubeflow SDK 0.5.0 (``kubeflow`` on PyPI), ``TrainerClient(backend_config=
  LocalProcessBackendConfig()).train(runtime=client.get_runtime("torch-distributed"),
  trainer=CustomTrainer(func=allreduce_once, packages_to_install=["torch==…"]))``, timed from the ``train()`` call
  to ``get_job(name).status == "Complete"`` (polled every 50 ms; its own ``wait_for_job_status`` polls every 2 s).
  Its local process backend makes a virtual environment for every job (``python -m venv --without-pip``, then
  ``ensurepip``), pip-installs the runtime's packages and the trainer's into it (torch from PyPI, with its
  dependencies), runs the function under that environment's ``torchrun``, then deletes the environment
  (kubeflow 0.5.0 ``kubeflow/trainer/backends/localprocess/constants.py``, ``LOCAL_EXEC_JOB_TEMPLATE``).
  **A warm cache, made explicit.** pip's own cache cannot hold those files here: the registry this machine reaches
  answers without any caching header (no ``Cache-Control``, ``ETag`` or ``Last-Modified``), so pip stores nothing
  and every job downloads torch and its dependencies again (about 2.7 GB of wheels). So those wheels are downloaded
  once, by the pip a job gets (23.2.1: Python's bundled pip, which the job's ``ensurepip`` installs), into
  ``PEER_DIR/wheels``, and each timed job gets ``PIP_NO_INDEX=1`` and ``PIP_FIND_LINKS`` to that folder in
  ``CustomTrainer.env``: its pip installs from the folder and asks no index, which is faster than a warm cache
  (that still asks the index about every requirement). ``PIP_FIND_LINKS`` alone is not enough: for the same file
  in both places pip's resolver takes the index's (pypa/pip@23.2.1
  ``src/pip/_internal/resolution/resolvelib/factory.py``, ``_iter_found_candidates`` walks the candidates
  ``reversed``, and the finder lists the find-links ones first). One job as the docs run it, downloading from the
  registry, is timed once for reference (``--no-reference`` leaves it out). Each job also gets
  ``PET_MASTER_PORT`` (a free port), so its torchrun never meets another program on the default 29500 of this
  shared machine.

Rounds interleave the two (ours then peer, the next round peer then ours). Beside them, ours alone:

- 2 nodes × 2 processes (TrainJob ``numNodes: 2``, ``numProcPerNode: 2``): the SDK's local process backend runs one
  node with one process (its one local runtime has ``num_nodes=1``; ``torchrun`` without ``--nproc-per-node``), so
  it has no figure here;
- the same function as a PyTorchJob with a Master only, run by ``python`` itself (no torchrun), as
  ``components/training/README.md`` shows a function job.

The SDK is installed for this benchmark only, into a virtual environment of its own
(``~/.cache/kftrain/bench-kubeflow-sdk``: ``PEER_PACKAGES``, every other dependency at this project's
``constraints.txt`` version), and torch's wheels beside it, once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "bench" / "programs"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(PROGRAMS))

from allreduce_function import allreduce_once  # noqa: E402

from kftrain.backends.local.replica import free_port  # noqa: E402
from kftrain.launch.function import function_command  # noqa: E402

PEER_PACKAGES = ("kubeflow==0.5.0", "kubeflow-katib-api==0.19.0")  # the SDK, and its one dependency not in our lock
PEER_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kftrain" / "bench-kubeflow-sdk"
PEER_PYTHON = PEER_DIR / "bin" / "python"
PEER_WHEELS = PEER_DIR / "wheels"  # torch and its dependencies, for the jobs' pip (see the module's docstring)
KFTRAIN = Path(sys.executable).parent / "kftrain"
# The same requirement on both sides: the torch this environment has (the PyPI build, as the peer's pip gets it).
TORCH_REQUIREMENT = f"torch=={importlib.metadata.version('torch')}"

PEER_JOB = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from allreduce_function import allreduce_once
from kubeflow.trainer import CustomTrainer, LocalProcessBackendConfig, TrainerClient

client = TrainerClient(backend_config=LocalProcessBackendConfig())
started = time.perf_counter()
name = client.train(
    runtime=client.get_runtime("torch-distributed"),
    trainer=CustomTrainer(func=allreduce_once, packages_to_install=[sys.argv[2]], env=json.loads(sys.argv[3])),
)
while (status := client.get_job(name).status) not in ("Complete", "Failed"):
    time.sleep(0.05)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "status": status, "log": "\\n".join(client.get_job_logs(name))}))
"""


def ensure_peer() -> dict[str, float]:
    """The SDK's virtual environment and torch's wheels for its jobs, each made once; the seconds each took when
    made now (an empty mapping: both were there)."""
    took: dict[str, float] = {}
    marker = PEER_DIR / ".installed"
    if not (marker.exists() and marker.read_text() == "\n".join(PEER_PACKAGES)):
        shutil.rmtree(PEER_DIR, ignore_errors=True)  # a half-made or older one of this benchmark's own
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(PEER_DIR)], check=True)
        subprocess.run(
            [str(PEER_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-c", str(ROOT / "constraints.txt"), *PEER_PACKAGES],
            check=True,
        )  # fmt: skip
        marker.write_text("\n".join(PEER_PACKAGES))
        took["sdk_s"] = time.perf_counter() - started
    wheels_marker = PEER_WHEELS / ".downloaded"
    if not (wheels_marker.exists() and wheels_marker.read_text() == TORCH_REQUIREMENT):
        shutil.rmtree(PEER_WHEELS, ignore_errors=True)
        started = time.perf_counter()
        # The venv's pip is the one a job's ensurepip installs (both Python's bundled pip), with the index pip is
        # configured with, as a job's pip has it.
        subprocess.run(
            [str(PEER_PYTHON), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--dest", str(PEER_WHEELS), TORCH_REQUIREMENT],
            check=True,
        )  # fmt: skip
        wheels_marker.write_text(TORCH_REQUIREMENT)
        took["wheels_s"] = time.perf_counter() - started
    return took


def peer_job(tmp: Path, *, warm: bool = True) -> dict[str, Any]:
    """One job through the SDK, in a process of its own, as its virtual environment's user runs it; ``warm``: its
    pip installs torch's wheels from ``PEER_WHEELS`` (else it downloads them, as the docs' example does)."""
    env = {**os.environ, "PATH": f"{PEER_DIR / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(PEER_DIR)}
    env.pop("PYTHONPATH", None)
    # A temporary folder for the job alone, removed after it: the backend makes each job's virtual environment there
    # (and removes it), and its torchrun, started with an environment of the SDK's own making, gets it through the
    # job's env, where it leaves its rendezvous folder (torchelastic_*) behind.
    with tempfile.TemporaryDirectory(prefix="peer-job-", dir=tmp) as job_tmp:
        env["TMPDIR"] = job_tmp
        job_env = {"PET_MASTER_PORT": str(free_port()), "TMPDIR": job_tmp}
        if warm:
            job_env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(PEER_WHEELS)}
        cmd = [str(PEER_PYTHON), "-c", PEER_JOB, str(PROGRAMS), TORCH_REQUIREMENT, json.dumps(job_env)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=job_tmp, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the peer's job failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    log = result.pop("log")
    if result["status"] != "Complete" or "ALLREDUCE rank 0 of 1: sum 1" not in log:
        raise RuntimeError(f"the peer's job ended {result['status']}:\n{log[-3000:]}")
    installed = re.findall(r"^Successfully installed (.*)$", log, re.MULTILINE)
    result["installed"] = installed[-1].split() if installed else []
    result["downloaded"] = len(re.findall(r"^\s*Downloading \S+", log, re.MULTILINE))  # files from the network
    return result


def trainjob(name: str, nodes: int, procs: int) -> dict[str, Any]:
    command = function_command(
        allreduce_once, packages_to_install=[TORCH_REQUIREMENT], prefix=["torchrun", "--no-python"]
    )
    trainer = {"numNodes": nodes, "numProcPerNode": procs, "image": "example.com/torch:1", "command": command}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
    }


def pytorchjob(name: str) -> dict[str, Any]:
    container = {
        "name": "pytorch",
        "image": "example.com/torch:1",
        "command": function_command(allreduce_once, packages_to_install=[TORCH_REQUIREMENT]),
    }
    master = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": master}},
    }


def our_job(manifest: dict[str, Any], world: int, tmp: Path) -> float:
    """``kftrain launch -f job.yaml --local``, timed from its start to its exit; every rank's sum checked."""
    path = tmp / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    # This benchmark's jobs, not in the user's list; their folders made in ``tmp``, where what is left shows.
    env = {**os.environ, "KFTRAIN_STATE_DIR": str(tmp / "state"), "TMPDIR": str(tmp)}
    started = time.perf_counter()
    proc = subprocess.run([str(KFTRAIN), "launch", "-f", str(path), "--local"], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=600)  # fmt: skip
    seconds = time.perf_counter() - started
    out = proc.stdout + proc.stderr
    expected = [f"ALLREDUCE rank {r} of {world}: sum {world * (world + 1) // 2}" for r in range(world)]
    if proc.returncode != 0 or not all(line in out for line in expected):
        raise RuntimeError(f"kftrain's job failed ({proc.returncode}):\n{out[-3000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="ours,peer", help="ours, peer or both")
    parser.add_argument("--no-reference", action="store_true", help="leave out the peer's job that downloads torch")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    sides = [s.strip() for s in args.only.split(",") if s.strip()]
    data: dict[str, Any] = {"torch_requirement": TORCH_REQUIREMENT, "sides": sides, "peer_packages": PEER_PACKAGES}
    with tempfile.TemporaryDirectory(prefix="kftrain-p13-") as name:
        tmp = Path(name)
        if "peer" in sides:
            data["peer_install_s"] = ensure_peer()
            data["peer_wheels_mb"] = sum(p.stat().st_size for p in PEER_WHEELS.glob("*.whl")) / 1e6
            if not args.no_reference:
                data["peer_downloading"] = peer_job(tmp, warm=False)
        rounds = []
        for i in range(args.repeat):
            found: dict[str, Any] = {}
            for side in sides if i % 2 == 0 else sides[::-1]:
                if side == "ours":
                    found["ours"] = our_job(trainjob(f"p13-one-{i}", 1, 1), 1, tmp)
                else:
                    found["peer"] = peer_job(tmp)
            rounds.append(found)
            print(json.dumps(found), flush=True)
        data["rounds"] = rounds
        if "ours" in sides:
            data["ours_2x2"] = [our_job(trainjob(f"p13-two-{i}", 2, 2), 4, tmp) for i in range(args.repeat)]
            data["ours_pytorchjob"] = [our_job(pytorchjob(f"p13-master-{i}"), 1, tmp) for i in range(args.repeat)]
        left = sorted(p.name for p in tmp.iterdir() if p.name != "state" and not p.name.endswith(".yaml"))
        data["left_in_tmp"] = left  # what a job left in its temporary folder (the peer's removes its environment)
    Path(args.json).write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

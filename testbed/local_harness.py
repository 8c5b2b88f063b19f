"""The local backend's tests' programs and helpers: replicas that dump what they see, fail, restart, sleep or
spawn children; the jobs that run them; and checks of the env contract and of the processes left behind."""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import yaml

from kftrain.backends.base import JobResult
from kftrain.backends.local import LocalConfig
from kftrain.contract import BACKEND_ENV
from testbed.manifests import pytorchjob, replica

PY = sys.executable
GRACE_S = 1  # terminationGracePeriodSeconds of every marked replica: SIGKILL follows SIGTERM after a second

# Names of the operators' contracts a replica could see; a replica's view of these must be exactly the contract.
CONTRACT_NAMES = {
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "PYTHONUNBUFFERED",
    "K_MPI_JOB_ROLE",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_set_default_slots",
    "I_MPI_HYDRA_HOST_FILE",
    "I_MPI_PERHOST",
    "HYDRA_HOST_FILE",
}


# Dumps argv, env and the MPI hostfile to $OUT_DIR/$POD_NAME.json, then waits until $EXPECT replicas have.
DUMP = """
import glob, json, os, sys, time
out = os.environ["OUT_DIR"]
hostfile = os.environ.get("OMPI_MCA_orte_default_hostfile")
data = {"argv": sys.argv[1:], "env": dict(os.environ),
        "hostfile": open(hostfile).read() if hostfile and os.path.exists(hostfile) else None}
tmp = os.path.join(out, os.environ["POD_NAME"] + ".tmp")
with open(tmp, "w") as f:
    json.dump(data, f)
os.rename(tmp, tmp[:-4] + ".json")
deadline = time.time() + 10
while len(glob.glob(os.path.join(out, "*.json"))) < int(os.environ.get("EXPECT", "1")) and time.time() < deadline:
    time.sleep(0.02)
"""


# Runs once more each time: appends to $OUT_DIR/runs, then behaves per argv[1] and the run number.
FLAKY = """
import os, signal, sys, time
runs = os.path.join(os.environ["OUT_DIR"], "runs")
with open(runs, "a") as f:
    f.write("x")
n = len(open(runs).read())
mode = sys.argv[1]
print(f"run {n} mode {mode}", flush=True)
if mode == "exit1" or (mode == "fail-once" and n == 1):
    sys.exit(1)
if mode == "kill-always" or (mode == "kill-once" and n == 1):
    os.kill(os.getpid(), signal.SIGKILL)
"""


# Writes its pid to $OUT_DIR/pid-$POD_NAME; RANK 2 prints a few lines and exits 3 once all 3 have started.
FAILER = """
import glob, os, sys, time
out = os.environ["OUT_DIR"]
open(os.path.join(out, "pid-" + os.environ["POD_NAME"]), "w").write(str(os.getpid()))
if os.environ["RANK"] != "2":
    time.sleep(60)
while len(glob.glob(os.path.join(out, "pid-*"))) < 3:
    time.sleep(0.02)
for line in ("step 1", "step 2", "loss nan", "fatal: boom"):
    print(line, flush=True)
sys.exit(3)
"""


SLEEPER = """
import os, signal, sys, time
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(os.environ["OUT_DIR"], "pid-" + os.environ["POD_NAME"]), "w").write(str(os.getpid()))
while True:
    time.sleep(0.1)
"""


def program(tmp_path: Path, name: str, source: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return [PY, str(path)]


def options(tmp_path: Path, **kw: Any) -> LocalConfig:
    defaults: dict[str, Any] = {
        "workdir": tmp_path / "wd",
        "out": io.StringIO(),
        "grace_period_s": 2.0,
        "poll_interval_s": 0.02,
        "restart_backoff_s": 0.05,
    }
    defaults.update(kw)
    return LocalConfig(**defaults)


def pod_env(out_dir: Path, expect: int = 1, *more: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "OUT_DIR", "value": str(out_dir)},
        {"name": "EXPECT", "value": str(expect)},
        *more,
    ]


def rep(n: int, cname: str, command: list[str] | None, env: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return replica(n, cname, command, env=env, **kw)


def dumps(out_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))}


def contract(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in CONTRACT_NAMES or k.startswith(("PET_", "TORCHELASTIC_"))}


def _interpreter_sets() -> set[str]:
    """Variables this Python sets in its own environment as it starts (the Horovod build's ``.pth`` sets
    ``TF_USE_LEGACY_KERAS``, as the framework images' ``ENV`` does): a replica's program sees them whatever it
    is given."""
    probe = "import json, os; print(json.dumps(sorted(os.environ)))"
    started = subprocess.run([sys.executable, "-c", probe], env={}, capture_output=True, text=True, check=True)
    return set(json.loads(started.stdout)) - {"LC_CTYPE"}


# What an image gives a clean-env replica before its spec's env (LocalConfig.clean_env), and the one variable the local
# backend adds to every replica (KFTRAIN_BACKEND=local: kftrain.contract.BACKEND_ENV).
_IMAGE_BASE = (
    {"PATH", "HOME", "LANG", "HOSTNAME", "TMPDIR"}  # TMPDIR: each job's replicas get a temporary folder of their own
    | {BACKEND_ENV}
    | {k for k in ("LC_ALL", "TZ") if k in os.environ}
)


@functools.cache
def image_base() -> frozenset[str]:
    """:data:`_IMAGE_BASE` and what the interpreter sets: asked when a test asks, not when the suite is collected
    (testbed.fixtures imports this module; the probe is a process)."""
    return frozenset(_IMAGE_BASE | _interpreter_sets())


def assert_only_declared(env: dict[str, str], pod: str, *declared: str) -> None:
    """A clean-env replica sees the image's base, what its spec declares, the contract, and nothing else."""
    assert set(env) - set(contract(env)) - image_base() == set(declared), pod
    assert env["HOSTNAME"] == pod


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pids(out_dir: Path) -> dict[str, int]:
    return {p.name[4:]: int(p.read_text()) for p in out_dir.glob("pid-*")}


def assert_ok(result: JobResult, opts: LocalConfig) -> None:
    assert result.succeeded, f"{result.describe()}\n{opts.out.getvalue()}"  # type: ignore[union-attr]


def marked_job(tmp_path: Path, mark: str, source: str, workers: int = 2, restart: str = "Never", **env: str) -> Path:
    """A PyTorchJob file whose Master and ``workers`` Workers run ``source``, every process marked with ``mark``."""
    program = tmp_path / "replica.py"
    program.write_text(textwrap.dedent(source))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    environment = [
        {"name": "HARDEN_MARK", "value": mark},
        {"name": "OUT", "value": str(out)},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *({"name": k, "value": v} for k, v in env.items()),
    ]

    def spec(n: int) -> dict:
        r = replica(n, "pytorch", [PY, str(program)], restart_policy=restart, env=environment)
        r["template"]["spec"]["terminationGracePeriodSeconds"] = GRACE_S
        return r

    path = tmp_path / "job.yaml"
    # No Worker spec for none: training-operator's webhook refuses a replica spec of 0 pods.
    replicas = {"Master": spec(1), **({"Worker": spec(workers)} if workers else {})}
    path.write_text(yaml.safe_dump(pytorchjob(replicas, name="hyg")))
    return path


def launch_cli(path: Path, tmp_path: Path, *extra: str, stdout=None, wrapper: tuple[str, ...] = ()) -> subprocess.Popen:
    """``kftrain launch --local -f PATH`` in a process of its own, its output in tmp_path/kftrain.log."""
    command = [PY, "-m", "kftrain.cli", "launch", "--local", "-f", str(path), "--workdir", str(tmp_path / "wd")]
    with open(tmp_path / "kftrain.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([*wrapper, *command, *extra], stdout=stdout or log, stderr=log)


def finish(proc: subprocess.Popen, timeout: float) -> int:
    """``proc``'s exit code; a kftrain that does not end in time is killed (its replicas then stop themselves)."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def children() -> set[psutil.Process]:
    """This process's descendants now."""
    return set(psutil.Process().children(recursive=True))


def marked(mark: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``HARDEN_MARK=mark``, wherever they are on the machine."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("HARDEN_MARK") == mark:
                found.append(proc)
        except psutil.Error:
            continue
    return found

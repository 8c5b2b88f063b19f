"""P15: what the real control plane itself costs: building it, starting it, holding it, stopping it.

    python bench/bench_controlplane.py [--repeat 3] [--idle 10] [--cold] --json out.json

The controlplane tests (testbed/controlplane) start etcd, kube-apiserver, kube-controller-manager and the Kubeflow
operators built from Go modules (``make controlplane``). Measured here, the way the tests use them:

- **warm build**: both build scripts with their cache filled, as every test run calls them (``make controlplane``):
  they must build nothing, and the time is theirs to find that out;
- **cold build** (``--cold``): both scripts into empty Go module, Go build and binary caches of their own (a fresh
  machine; the modules come from the Go module proxy), each component's time as the scripts print it;
- **start**: ``control_plane(operators=every operator)``, the tests' fixture, from its first process to every
  operator ready (its webhooks served), with the time each phase was done;
- **memory and idle CPU**: each process's resident memory after ``--idle`` seconds of the control plane doing nothing,
  and its CPU seconds over those seconds (the operators' resyncs, the controller manager's loops);
- **stop**: leaving the fixture: every process stopped, in reverse order, and its folder removed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.controlplane.cluster import control_plane, missing_binaries  # noqa: E402
from testbed.controlplane.kubeflow_operators import OPERATORS, missing_operators  # noqa: E402

BUILD_SCRIPTS = (
    ROOT / "testbed" / "controlplane" / "build.sh",
    ROOT / "testbed" / "controlplane" / "operators" / "build.sh",
)
# What each script prints on stderr when it builds a component (build.sh, operators/build.sh).
BUILT = re.compile(r"^build\.sh: built (.+?) in (\d+) s$", re.MULTILINE)
BUILDING = re.compile(r"^build\.sh: building ", re.MULTILINE)


def run_builds(env: dict[str, str] | None = None) -> tuple[float, dict[str, int], str]:
    """Both build scripts, one after the other: their wall time, what each component took as they print it, and
    their stderr."""
    began = time.perf_counter()
    said = []
    for script in BUILD_SCRIPTS:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**os.environ, **(env or {})})
        if proc.returncode != 0:
            raise RuntimeError(f"{script} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        said.append(proc.stderr)
    stderr = "".join(said)
    return time.perf_counter() - began, {m[1]: int(m[2]) for m in BUILT.finditer(stderr)}, stderr


def warm_build() -> dict[str, Any]:
    took, built, stderr = run_builds()
    return {"s": took, "built": built, "built_nothing": not BUILDING.search(stderr)}


def cold_build() -> dict[str, Any]:
    """Both scripts into empty caches of their own, removed afterwards (several GB of Go's build cache)."""
    with tempfile.TemporaryDirectory(prefix="kftrain-bench-cold-") as tmp:
        scratch = Path(tmp)
        env = {
            "GOMODCACHE": str(scratch / "mod"),
            "GOCACHE": str(scratch / "build"),
            "KFTRAIN_CONTROLPLANE_CACHE": str(scratch / "bin"),
            # Go writes the module cache read-only; writable, the folder can be removed.
            "GOFLAGS": "-modcacherw",
        }
        took, built, _ = run_builds(env)
        sizes = {name: _du(scratch / name) for name in ("mod", "build", "bin")}
    return {"s": took, "built": built, "bytes": sizes}


def _du(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def one_start(operators: list[str], idle_s: float) -> dict[str, Any]:
    """One start of the tests' fixture with ``operators``: its phases, each process's memory and CPU after
    ``idle_s`` of nothing, and the time to leave it."""
    began = time.monotonic()
    with control_plane(operators=operators) as plane:
        started = time.monotonic() - began
        procs = {name: psutil.Process(p.pid) for name, p in plane.processes.items()}
        cpu_before = {name: _cpu_s(p) for name, p in procs.items()}
        time.sleep(idle_s)
        cpu = {name: _cpu_s(p) - cpu_before[name] for name, p in procs.items()}
        rss = plane.rss_bytes()
        phases = dict(plane.phases)
        popens = list(plane.processes.values())
        stopping = time.monotonic()
    stopped = time.monotonic() - stopping
    left = [p.pid for p in popens if p.poll() is None]
    return {
        "start_s": started,
        "phases_s": phases,
        "rss_bytes": rss,
        "idle_cpu_s": cpu,
        "stop_s": stopped,
        "left_running": left,
    }


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="starts of the control plane")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of nothing before memory and CPU are read")
    parser.add_argument("--operators", default=",".join(OPERATORS), help="comma-separated (default: all)")
    parser.add_argument("--cold", action="store_true", help="also build everything into empty caches (~15 min)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    operators = [name for name in args.operators.split(",") if name]
    unknown = sorted(set(operators) - set(OPERATORS))
    if unknown:
        parser.error(f"--operators: unknown {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    if shutil.which("go") is None and (missing_binaries(with_controller_manager=True) or missing_operators(operators)):
        parser.error("the control plane is not built and there is no Go here to build it: install Go")

    result: dict[str, Any] = {"operators": operators, "idle_s": args.idle}
    result["warm_build"] = warm_build()  # builds what is missing the first time, so the starts below have it
    if not result["warm_build"]["built_nothing"]:
        result["first_build"] = result.pop("warm_build")
        result["warm_build"] = warm_build()
    if args.cold:
        result["cold_build"] = cold_build()
    starts = [one_start(operators, args.idle) for _ in range(args.repeat)]
    result["starts"] = starts
    result["start_s_median"] = statistics.median(s["start_s"] for s in starts)
    result["stop_s_median"] = statistics.median(s["stop_s"] for s in starts)
    result["rss_total_bytes_median"] = statistics.median(sum(s["rss_bytes"].values()) for s in starts)
    result["idle_cpu_s_per_min_median"] = statistics.median(
        sum(s["idle_cpu_s"].values()) * 60 / args.idle for s in starts
    ) if args.idle > 0 else None  # fmt: skip
    args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

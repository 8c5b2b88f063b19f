"""P9: what launch steps cost the Kubernetes API server when many run at once, against the Kubeflow training SDK.

    python bench/bench_launcher.py [--jobs 50] [--duration 60] [--only ours,baseline] --json out.json

A fake API server (testbed/fake_k8s, real HTTP, counting requests by verb and the watches and log streams open)
and its simulated operator run ``--jobs`` PyTorchJobs at once, each Master + 3 Workers that run ``--duration``
seconds, logging a line per replica every second, then succeed. The same jobs are waited on twice, side by side
in one run:

- **ours**: each job by one launch step in its own process, ``pytorchjob_launch``'s own function with
  ``backend="kubernetes"`` and a kubeconfig (as a step outside a pod finds its cluster), streaming every log;
- **baseline**: each job created by the Kubernetes client, then waited on by ``kubeflow-training``'s
  ``TrainingClient.wait_for_job_conditions`` (its default 15 s polling), in its own process; no logs.

Figures: requests by verb per job; requests per job-minute over the whole run and in the steady state (while
every job is Running: what a long job costs per minute, the fixed costs of starting and ending left out);
the watches and log streams open at most; each launcher's peak RSS and CPU seconds per job-minute (from
``wait4``); whether every job ended as it should. ``kubeflow-training`` is installed for this benchmark only
(``pip install --target`` into a cache folder, no dependencies: the ones it needs are this project's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.fake_k8s import FakeKube, JobSim, OperatorSim  # noqa: E402

CRD_DIR = ROOT.parent / "shared" / "reference" / "crds"
NAMESPACE = "bench"
BASELINE_PACKAGES = ("kubeflow-training==1.9.4", "retrying==1.4.2")
BASELINE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kftrain" / "bench-kubeflow-training"

LAUNCH_STEP = """
import sys
from types import SimpleNamespace
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch

tmp, index = sys.argv[1], sys.argv[2]
pytorchjob_launch.python_func(
    dataset_uri=f"{tmp}/dataset",
    model=SimpleNamespace(uri=f"{tmp}/model-{index}", metadata={}),
    job=f"{tmp}/job-{index}",
    metrics=SimpleNamespace(uri=f"{tmp}/metrics-{index}", metadata={}, log_metric=lambda name, value: None),
    curves=SimpleNamespace(uri=f"{tmp}/curves-{index}", metadata={}, path=f"{tmp}/curves-{index}.html"),
    run_id=f"run-{index}",
    task_id="train",
    backend="kubernetes",
    workers=3,
    command=["python", "train.py"],
    image="example.com/train:1",
    pending_timeout_seconds=600,
)
"""

BASELINE_WAIT = """
import sys
import yaml
from kubernetes import client, config
from kubeflow.training import TrainingClient

kubeconfig, manifest, polling, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
job = yaml.safe_load(open(manifest))
name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
config.load_kube_config(config_file=kubeconfig)
client.CustomObjectsApi().create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", job)
training = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="PyTorchJob")
training.wait_for_job_conditions(name, namespace=namespace, polling_interval=polling, wait_timeout=timeout)
print("Succeeded", flush=True)
"""


def pytorchjob(name: str) -> dict[str, Any]:
    def replicas(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "example.com/train:1", "command": ["python", "train.py"]}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        # runPolicy: the operator defaults it on a real cluster; the SDK's model refuses a job without one.
        "spec": {"pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(3)}, "runPolicy": {}},
    }


class Timeline:
    """When each job was created, got its pods, started running and ended, from the simulated operator."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.created: dict[str, float] = {}
        self.pods_created: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.replicas: dict[str, int] = {}  # how many replica pods each job has

    def mark(self, table: dict[str, float], name: str) -> None:
        with self.lock:
            table[name] = time.monotonic()


class OneWorker:
    """An operator's one worker going through its queue in order, ``each_s`` seconds a job (a workqueue is first in,
    first out: k8s.io/client-go's util/workqueue)."""

    def __init__(self, each_s: float) -> None:
        self.each_s = each_s
        self._lock = threading.Lock()
        self._free_at = 0.0

    def turn(self) -> float:
        """When the job that asks now has been done (monotonic time)."""
        with self._lock:
            self._free_at = max(time.monotonic(), self._free_at) + self.each_s
            return self._free_at


def scenario(timeline: Timeline, duration_s: float, reconcile_s: float = 0.0) -> Any:
    """Each job: its pods, running ``duration_s`` seconds with a log line a second, then success. With
    ``reconcile_s``, the operator creates one job's pods at a time, each taking that long, as training-operator's
    one worker does (kubeflow/training-operator@v1.9.0:cmd/training-operator.v1/main.go, --controller-threads
    default 1), so a burst of jobs waits its turn for pods; without, every job gets its pods at once."""
    worker = OneWorker(reconcile_s)

    def play(sim: JobSim) -> None:
        timeline.mark(timeline.created, sim.name)
        time.sleep(max(0.0, worker.turn() - time.monotonic()))
        timeline.replicas[sim.name] = len(sim.create_pods())
        timeline.mark(timeline.pods_created, sim.name)
        sim.condition("Created")
        sim.start()
        sim.condition("Running")
        timeline.mark(timeline.running, sim.name)
        end = time.monotonic() + duration_s
        step = 0
        while time.monotonic() < end:
            for label in sim.labels():
                sim.log(label, f"step {step} loss {1.0 / (step + 1):.4f}")
            step += 1
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            sim.check()
        if sim.env("KFTRAIN_MODEL_URI"):  # ours (the step checks it was written); the baseline has none
            sim.write_model()
        # The job stops running here: marked before anything the launcher can react to (its containers ending,
        # then the condition), so what it asks once the job has ended (the one list of its pods) is never taken
        # for a request of the steady state. Marked after the condition, that list could come first.
        timeline.mark(timeline.ended, sim.name)
        sim.exit_all(0)
        sim.condition("Succeeded")

    return play


def ensure_baseline() -> Path:
    """kubeflow-training in a folder of its own (its dependencies are this project's, at the lock's versions)."""
    marker = BASELINE_DIR / ".installed"
    if not marker.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(BASELINE_DIR),
             *BASELINE_PACKAGES],
            check=True,
        )  # fmt: skip
        marker.write_text("\n".join(BASELINE_PACKAGES))
    return BASELINE_DIR


def wait_all(procs: list[tuple[subprocess.Popen[bytes], IO[str]]]) -> tuple[list[int], list[tuple[float, float]]]:
    """Each launcher's exit code, and its peak RSS (MB) and CPU seconds (from ``wait4``), its output file closed."""
    codes, usage = [], []
    for proc, out in procs:
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.close()
        codes.append(proc.returncode)
        usage.append((rusage.ru_maxrss / 1024.0, rusage.ru_utime + rusage.ru_stime))
    return codes, usage


def run_side(
    side: str, jobs: int, duration_s: float, polling_s: int, settle_s: float, tmp: Path, reconcile_s: float = 0.0
) -> dict[str, Any]:
    kube = FakeKube(CRD_DIR).start()
    timeline = Timeline()
    operator = OperatorSim(kube, scenario(timeline, duration_s, reconcile_s))
    config = kube.write_kubeconfig(tmp / f"kubeconfig-{side}", NAMESPACE)
    env = {**os.environ, "KUBECONFIG": str(config), "KFP_POD_NAME": "", "KFP_POD_UID": ""}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if side == "baseline":
        env["PYTHONPATH"] = os.pathsep.join([str(ensure_baseline()), env.get("PYTHONPATH", "")])
    procs = []
    started = time.monotonic()
    for i in range(jobs):
        out = open(tmp / f"{side}-{i}.log", "w")  # noqa: SIM115  # closed below, after the process ends
        if side == "ours":
            cmd = [sys.executable, "-c", LAUNCH_STEP, str(tmp), str(i)]
        else:
            manifest = tmp / f"job-{i}.yaml"
            manifest.write_text(yaml.safe_dump(pytorchjob(f"baseline-{i:04d}")))
            timeout = int(duration_s * 4 + 600)
            cmd = [sys.executable, "-c", BASELINE_WAIT, str(config), str(manifest), str(polling_s), str(timeout)]
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT), out))
    codes, usage = wait_all(procs)
    wall = time.monotonic() - started
    operator.join(5.0)
    with kube.cond:
        stats = kube.stats.snapshot()
        stats_log = list(kube.stats.log)
    kube.stop()
    logs = [(tmp / f"{side}-{i}.log").read_text() for i in range(jobs)]
    expected = "succeeded in" if side == "ours" else "Succeeded"
    ok = [code == 0 and expected in text for code, text in zip(codes, logs, strict=True)]
    job_minutes = [(timeline.ended[n] - timeline.created[n]) / 60 for n in timeline.ended]
    total_job_minutes = sum(job_minutes)
    requests = Counter(stats["requests"])
    # The steady state of each job: from `settle_s` after it started running, and not before the launcher has
    # opened what it keeps open (a watch of the job and one of its pods, a log stream per replica: fixed costs,
    # however late a loaded machine opens them; any opened beyond those counts), to its end. A request counts for
    # the job whose name its path holds.
    steady_requests = 0
    steady_minutes = 0.0
    steady_seen: list[
        tuple[float, str, str]
    ] = []  # a few of them, each as (seconds into its job's steady state, verb, path)
    for name, end in timeline.ended.items():
        begin = timeline.running[name] + settle_s
        fixed: set[int] = set()  # the requests that open what is kept open, by their index in the log
        for verb, kept_open in (("watch", 2), ("log-follow", timeline.replicas[name])):
            opened = [i for i, (_, v, path) in enumerate(stats_log) if v == verb and name in path][:kept_open]
            fixed.update(opened)
            if len(opened) == kept_open:
                begin = max(begin, stats_log[opened[-1]][0])
        if end <= begin:
            continue
        steady_minutes += (end - begin) / 60
        # The last opening is at `begin` itself when the machine opened it late: a fixed cost, not the steady state's.
        counted = [
            (round(t - begin, 3), verb, path)
            for i, (t, verb, path) in enumerate(stats_log)
            if begin <= t < end and name in path and i not in fixed
        ]
        steady_requests += len(counted)
        steady_seen.extend(counted[:5])
    steady_rate = steady_requests / steady_minutes if steady_minutes else None
    delays = [timeline.pods_created[n] - timeline.created[n] for n in timeline.pods_created]
    cpu_s = sum(cpu for _, cpu in usage)
    return {
        "side": side,
        "jobs": jobs,
        "ok": sum(ok),
        "failed_logs": [text[-1500:] for good, text in zip(ok, logs, strict=True) if not good][:3],
        "wall_s": wall,
        "requests_by_verb_per_job": {k: v / jobs for k, v in sorted(requests.items())},
        "requests_per_job": sum(requests.values()) / jobs,
        "requests_per_job_minute": sum(requests.values()) / total_job_minutes if total_job_minutes else None,
        "steady_requests_per_job_minute": steady_rate,
        "steady_requests": steady_seen,
        # The operator's delay from a job's creation to its pods'.
        "pods_created_after_s": {"median": statistics.median(delays), "max": max(delays)} if delays else None,
        "steady_job_minutes": steady_minutes,
        "peak_open": stats["peak"],
        "operator_errors": operator.errors[:3],
        "rss_mb": {"median": statistics.median(u[0] for u in usage), "max": max(u[0] for u in usage)},
        "cpu_s_per_launcher": {"median": statistics.median(u[1] for u in usage), "max": max(u[1] for u in usage)},
        # All the launchers' CPU seconds over all the jobs' minutes (created to ended, by the operator's clock).
        "cpu_s_per_job_minute": cpu_s / total_job_minutes if total_job_minutes else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds each job runs")
    parser.add_argument("--polling", type=int, default=15, help="the baseline's polling_interval (its default: 15)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after a job runs before its steady state")
    parser.add_argument("--only", default="ours,baseline")
    parser.add_argument(
        "--reconcile", type=float, default=0.0, help="seconds the operator takes over a job's pods, one job at a time"
    )
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    if not CRD_DIR.is_dir():
        raise SystemExit(f"the operators' CRDs are needed (the fake API server validates jobs): {CRD_DIR} is missing")
    results = {}
    with tempfile.TemporaryDirectory(prefix="kftrain-p9-") as tmp:
        for side in args.only.split(","):
            results[side] = run_side(
                side, args.jobs, args.duration, args.polling, args.settle, Path(tmp), args.reconcile
            )
            print(json.dumps(results[side]), flush=True)
    Path(args.json).write_text(json.dumps({"jobs": args.jobs, "duration_s": args.duration, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

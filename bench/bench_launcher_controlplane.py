"""P9 on the real API server: what launch steps cost kube-apiserver when many run at once.

    python bench/bench_launcher_controlplane.py [--jobs 50] [--duration 60] --json out.json

P9 (bench/bench_launcher.py) counts requests on the fake API server. Here the same launch steps (``pytorchjob_launch``'s
own function, one process each, ``backend="kubernetes"``, a kubeconfig) run against the control plane of
testbed/controlplane: kube-apiserver 1.36.3 and etcd, kube-controller-manager and training-operator v1.9.0, built from
Go modules (``make controlplane``). The node agent (testbed/controlplane/node_agent.py) runs each job's pods: Master +
3 Workers, each printing a line a second, which the launch step follows through the API server's log endpoint as it
would the kubelet's; after ``--duration`` seconds of every pod running, they succeed.

The launch steps hold a token of their own ServiceAccount, and the API server's audit log (``--audit-policy-file``,
stage RequestReceived, that user only) records each of their requests: counted by verb and resource per job, per
job-minute over the whole run and in the steady state (each job from ``--settle`` seconds after all its pods run, and
after its launcher has opened the watches and log streams it keeps open, to its end). The API server's CPU seconds
(``/proc``, over the whole run) are given per job-minute too; they include the operator's, the garbage collector's and
the node agent's requests, which a real cluster has as well (the agent lists pods every 0.1 s: more than a kubelet's
watch costs).
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
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_launcher import LAUNCH_STEP, wait_all  # noqa: E402
from kftrain.backends.kubernetes.config import KubernetesConfig  # noqa: E402
from testbed.controlplane.cluster import control_plane, missing_binaries  # noqa: E402
from testbed.controlplane.kubeflow_operators import missing_operators  # noqa: E402
from testbed.controlplane.namespaces import ready_namespace  # noqa: E402
from testbed.controlplane.node_agent import SUCCEED, NodeAgent  # noqa: E402

NAMESPACE = "bench"
ACCOUNT = "launcher"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
JOB_LABEL = "training.kubeflow.org/job-name"
REPLICAS = 4  # Master + 3 Workers (LAUNCH_STEP's workers=3)
# What a launch step keeps open for the whole job: a watch of its job and one of its pods, a log stream per replica.
KEPT_OPEN = {"watch ": 2, "get pods/log": REPLICAS}  # by the start of what read_audit names a request
# Only the launch steps' requests, each once, as it arrives (kubernetes@v1.36.3:staging/src/k8s.io/apiserver/pkg/apis/
# audit/v1/types.go: Policy, omitStages; stage RequestReceived is logged before the request is handled).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
    "rules": [{"level": "Metadata", "users": [USER]}, {"level": "None"}],
}


class Pods:
    """Plays each job's pods on the node agent: a line a second from every running pod, and once all of a job's
    pods have run ``duration_s`` seconds, success. Records when each job ran and ended."""

    def __init__(self, agent: NodeAgent, api_client: Any, duration_s: float) -> None:
        from kubernetes import client

        self.agent, self.duration_s = agent, duration_s
        self.core, self.custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        # The operator's delay, from the API server's creationTimestamps (whole seconds): job -> when it was
        # created, and when the last of its pods was.
        self.job_created: dict[str, float] = {}
        self.pods_created: dict[str, float] = {}
        self.running: dict[str, float] = {}  # job -> when all its pods were first seen running
        self.ended: dict[str, float] = {}  # job -> when its pods were told to succeed
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-pods", daemon=True)
        self._step = 0

    def __enter__(self) -> Pods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._tick()
            except Exception as exc:  # the run goes on; the result names it
                self.errors.append(repr(exc))

    def _tick(self) -> None:
        now = time.monotonic()
        by_job: dict[str, list[Any]] = {}
        for pod in self.core.list_namespaced_pod(NAMESPACE).items:
            job = (pod.metadata.labels or {}).get(JOB_LABEL)
            if job:
                by_job.setdefault(job, []).append(pod)
        self._step += 1
        for job, pods in by_job.items():
            running = [p for p in pods if p.status.phase == "Running"]
            if len(pods) == REPLICAS and job not in self.pods_created:
                # Once per job, as soon as all its pods are there (the job is there too, then).
                served = self.custom.get_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job)
                self.job_created[job] = _epoch(served["metadata"]["creationTimestamp"])
                self.pods_created[job] = max(p.metadata.creation_timestamp.timestamp() for p in pods)
            if job in self.ended:
                continue
            for pod in running:
                self.agent.prints(NAMESPACE, pod.metadata.name, f"step {self._step} loss {1.0 / self._step:.4f}")
            if len(running) == REPLICAS and job not in self.running:
                self.running[job] = now
            if job in self.running and now - self.running[job] >= self.duration_s:
                _write_model(pods)
                self.ended[job] = time.monotonic()
                for pod in pods:
                    self.agent.decide(NAMESPACE, pod.metadata.name, SUCCEED)


def _write_model(pods: list[Any]) -> None:
    """What the trainer does before it exits 0: a model where the job's KFTRAIN_MODEL_URI points (a local folder:
    the launch steps run on this machine)."""
    for pod in pods:
        for env in pod.spec.containers[0].env or []:
            if env.name == "KFTRAIN_MODEL_URI" and env.value:
                Path(env.value).mkdir(parents=True, exist_ok=True)
                (Path(env.value) / "model.bin").write_bytes(b"weights")
                return


def launcher_kubeconfig(plane: Any, api_client: Any, path: Path) -> None:
    """A kubeconfig holding a token of the launch steps' own ServiceAccount (cluster-admin: what is measured is what
    they ask, not what they may)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": ACCOUNT}})
    client.RbacAuthorizationV1Api(api_client).create_cluster_role_binding(
        {
            "metadata": {"name": "bench-launcher"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        }
    )
    token = core.create_namespaced_service_account_token(
        ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 24 * 3600}}
    ).status.token
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"] = [{"name": ACCOUNT, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = ACCOUNT
        context["context"]["namespace"] = NAMESPACE
    path.write_text(yaml.safe_dump(config))


def read_audit(path: Path) -> list[tuple[float, str, str]]:
    """(when, what, request URI) of each launch-step request: ``what`` is the verb and resource
    (``watch pytorchjobs``, ``get pods/log``)."""
    out = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "RequestReceived" or event["user"]["username"] != USER:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        when = _epoch(event["requestReceivedTimestamp"])
        out.append((when, f"{event['verb']} {resource}", event["requestURI"]))
    return out


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run(jobs: int, duration_s: float, settle_s: float, tmp: Path) -> dict[str, Any]:

    policy = tmp / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit = tmp / "audit.log"
    flags = [f"--audit-policy-file={policy}", f"--audit-log-path={audit}", "--audit-log-format=json"]
    with control_plane(operators=("training-operator",), apiserver_flags=flags) as plane:
        apiserver = psutil.Process(plane.processes["kube-apiserver"].pid)
        with plane.api_client() as api_client, NodeAgent(plane) as agent:
            ready_namespace(api_client, NAMESPACE)
            config = tmp / "kubeconfig"
            launcher_kubeconfig(plane, api_client, config)
            env = {**os.environ, "KUBECONFIG": str(config), "KFP_POD_NAME": "", "KFP_POD_UID": ""}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            # Wall time and monotonic time side by side: the audit log's stamps are wall time.
            offset = time.time() - time.monotonic()
            cpu_before = sum(apiserver.cpu_times()[:2])
            started = time.monotonic()
            with Pods(agent, api_client, duration_s) as pods:
                procs = []
                for i in range(jobs):
                    out = open(tmp / f"step-{i}.log", "w")  # noqa: SIM115  # closed once the process ends
                    cmd = [sys.executable, "-c", LAUNCH_STEP, str(tmp), str(i)]
                    procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT), out))
                codes, usage = wait_all(procs)
            wall = time.monotonic() - started
            cpu_s = sum(apiserver.cpu_times()[:2]) - cpu_before
            pod_errors = pods.errors[:3] + agent.errors[:3]
        requests = read_audit(audit)
    logs = [(tmp / f"step-{i}.log").read_text() for i in range(jobs)]
    ok = [code == 0 and "succeeded in" in text for code, text in zip(codes, logs, strict=True)]
    job_minutes = sum(pods.ended[j] - pods.running[j] for j in pods.ended) / 60
    by_what = Counter(what for _, what, _ in requests)
    delays = [pods.pods_created[j] - pods.job_created[j] for j in pods.pods_created]
    steady_requests, steady_minutes = 0, 0.0
    for job, end in pods.ended.items():
        begin = pods.running[job] + settle_s + offset
        for request, kept in KEPT_OPEN.items():
            opened = sorted(t for t, what, uri in requests if what.startswith(request) and job in uri)
            if len(opened) >= kept:
                begin = max(begin, opened[kept - 1])
        end += offset
        if end <= begin:
            continue
        steady_minutes += (end - begin) / 60
        steady_requests += sum(1 for t, _, uri in requests if begin <= t < end and job in uri)
    return {
        "jobs": jobs,
        "ok": sum(ok),
        "failed_logs": [text[-1500:] for good, text in zip(ok, logs, strict=True) if not good][:3],
        # The pods' lines each step printed, as it followed their logs (about duration × 4 replicas).
        "log_lines_per_step": statistics.median(text.count(" loss ") for text in logs),
        "errors": pod_errors,
        "wall_s": wall,
        "requests_by_what_per_job": {k: v / jobs for k, v in sorted(by_what.items())},
        "requests_per_job": len(requests) / jobs,
        "requests_per_job_minute": len(requests) / job_minutes if job_minutes else None,
        "steady_requests_per_job_minute": steady_requests / steady_minutes if steady_minutes else None,
        "steady_job_minutes": steady_minutes,
        # The operator's delay from a job's creation to its last pod's (whole seconds): while a job lacks pods, the
        # launch step reads the create failures (from KubernetesConfig.poll_interval_s after, then backing off).
        "pods_created_after_s": {
            "median": statistics.median(delays),
            "max": max(delays),
            "over_first_read": sum(d > KubernetesConfig.poll_interval_s for d in delays),
            "jobs": len(delays),
        }
        if delays
        else None,
        # Its one worker's pace through the burst: seconds per job from the first job's pods to the last's (the
        # fake side's operator is given it, so that both sides' steps meet the same wait for pods).
        "operator_s_per_job": (max(pods.pods_created.values()) - min(pods.pods_created.values()))
        / (len(pods.pods_created) - 1)
        if len(pods.pods_created) > 1
        else 0.0,
        "apiserver_cpu_s": cpu_s,
        "apiserver_cpu_s_per_job_minute": cpu_s / job_minutes if job_minutes else None,
        "rss_mb": {"median": statistics.median(u[0] for u in usage), "max": max(u[0] for u in usage)},
        "cpu_s_per_job_minute": sum(u[1] for u in usage) / job_minutes if job_minutes else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds each job's pods all run")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after a job runs before its steady state")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    missing = missing_binaries(with_controller_manager=True) + missing_operators(["training-operator"])
    if missing:
        raise SystemExit(f"the control plane is not built ({', '.join(missing)}): run `make controlplane`")
    with tempfile.TemporaryDirectory(prefix="kftrain-p9-real-") as tmp:
        result = run(args.jobs, args.duration, args.settle, Path(tmp))
    print(json.dumps(result), flush=True)
    Path(args.json).write_text(json.dumps({"duration_s": args.duration, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

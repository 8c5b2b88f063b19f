"""P17: pod creation to Running on the real node (kubelet, containerd, runc, the CNI bridge), no image pulled.

    python bench/bench_node_pods.py [--pods 20] --json out.json

Starts the node tier's control plane (testbed/controlplane/node.py, with the launch image in its containerd), then
creates ``--pods`` pods one at a time, each running ``sleep`` in the launch image (``imagePullPolicy: Never``), and
times each from its create call to a watch event showing it Running; each is deleted before the next. Kubernetes'
own target for this (its pod startup SLO, "without a pull") is p99 ≤ 5 s. Also written: the node's start phases
and the resident memory of its processes while the pods ran. Needs root, `make images` and `make controlplane`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.controlplane import node_pods  # noqa: E402
from testbed.controlplane.cluster import control_plane  # noqa: E402

NS = "default"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def time_to_running(core: Any, name: str) -> float:
    from kubernetes import watch

    manifest = node_pods.pod(name, node_pods.LAUNCH_IMAGE, ["sleep", "3600"], terminationGracePeriodSeconds=0)
    stream = watch.Watch()
    began = time.perf_counter()
    core.create_namespaced_pod(NS, manifest)
    selector = f"metadata.name={name}"
    for event in stream.stream(core.list_namespaced_pod, NS, field_selector=selector, timeout_seconds=60):
        if event["object"].status.phase == "Running":
            took = time.perf_counter() - began
            stream.stop()
            return took
    raise RuntimeError(f"pod {name} not Running within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    why = node_pods.missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    from kubernetes import client

    began = time.perf_counter()
    with control_plane(node_images=[node_pods.LAUNCH_IMAGE]) as plane, plane.api_client() as api_client:
        start_s = time.perf_counter() - began
        core = client.CoreV1Api(api_client)
        times = []
        for i in range(args.pods):
            name = f"bench-{i}"
            times.append(time_to_running(core, name))
            core.delete_namespaced_pod(name, NS, grace_period_seconds=1)
            node_pods.gone(core, name, NS)
        rss = {
            name: psutil.Process(proc.pid).memory_info().rss
            for name, proc in plane.processes.items()
            if proc.poll() is None
        }
        node = plane.parts["node"]
        phases = {**plane.phases, **{f"node {k}": v for k, v in getattr(node, "phases", {}).items()}}
    result = {
        "pods": args.pods,
        "seconds": times,
        "p50_s": percentile(times, 50),
        "p99_s": percentile(times, 99),
        "mean_s": statistics.mean(times),
        "start_s": start_s,
        "phases_s": phases,
        "rss_bytes": rss,
    }
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "seconds"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

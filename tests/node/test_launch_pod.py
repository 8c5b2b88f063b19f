"""The launch step as a pod on the real node: the launch image runs pytorchjob_launch's compiled command (KFP's
executor entry) under deploy/rbac's Role, bound to the `pipeline-runner` ServiceAccount, with in-cluster config; the
real training-operator makes the PyTorchJob's pods, which run on the same node with the operator's env and write the
model to a volume the step's pod shares (a hostPath PersistentVolume, bound by kube-controller-manager). With a
Worker, its `init-pytorch` container waits for the master's name in cluster DNS, and the Worker then reaches the
Master over the pod network by that name. The replicas run a small program in the launch image, not the framework
image (several GB to move into the node): what is real here is the pods, their env, names and network."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.controlplane import node_launch, node_net, node_pods
from testbed.controlplane.cluster import ControlPlane

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = node_launch.NS


@pytest.fixture(scope="module")
def shared(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """deploy/rbac's Role bound to `pipeline-runner`, and the folder the step and its replicas share."""
    folder = tmp_path_factory.mktemp("shared")
    with node_cluster.api_client() as api_client:
        node_launch.share(api_client, folder, NS)
    yield folder


def _run_step(core: Any, name: str, run: str, workers: int) -> tuple[Any, str]:
    core.create_namespaced_pod(NS, node_launch.step_pod(name, run, workers))
    pod, took = node_pods.wait_for(core, name, NS, node_pods.ended, timeout_s=300)
    log = core.read_namespaced_pod_log(name, NS)
    print(f"the step's pod ended in {took:.1f} s\n{log[-2000:]}")
    assert pod.status.phase == "Succeeded", log
    assert "succeeded in" in log and "Wrote executor output file" in log, log
    return pod, log


def _job_pod(core: Any, run: str, suffix: str) -> Any:
    names = [p for p in core.list_namespaced_pod(NS).items if run in p.metadata.name]
    (pod,) = [p for p in names if p.metadata.name.endswith(suffix)]
    return pod


def test_the_launch_step_runs_a_pytorchjob_on_the_node(core: Any, shared: Path) -> None:
    _run_step(core, "launch-1", "run-1", workers=0)
    master = _job_pod(core, "run-1", "-master-0")
    assert master.spec.node_name == "kftrain-node"
    line = next(x for x in core.read_namespaced_pod_log(master.metadata.name, NS).splitlines() if "replica-env" in x)
    env = json.loads(line.split(" ", 1)[1])
    job = master.metadata.labels["training.kubeflow.org/job-name"]
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["RANK"]) == (f"{job}-master-0", "1", "0"), env
    assert (shared / "run-1" / "model" / "rank-0.txt").read_text() == "alone"


def test_the_launch_step_runs_a_master_and_a_worker_that_finds_it_by_name(core: Any, shared: Path) -> None:
    """With a Worker: its init-pytorch (the node's init image) ends once the Master's name resolves (the kubelet
    starts the Worker's container only after its init containers exit 0), and the Worker then reaches the Master by
    that name over the pod network. The pods are read from what each wrote: once the step has ended, its job's pods
    may already be gone."""
    _run_step(core, "launch-2", "run-2", workers=1)
    model = shared / "run-2" / "model"
    heard = (model / "rank-0.txt").read_text()
    said, _, address = heard.rpartition(" via ")
    assert said == "worker 1" and ipaddress.ip_address(address) in node_net.NETWORK, heard
    assert (model / "rank-1.txt").read_text() == "master"

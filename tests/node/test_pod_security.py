"""Pod Security `restricted` on the real node: in a namespace enforcing it, the pytorchjob_launch step runs as a pod
that meets it itself (a non-root UID, the runtime's seccomp profile, no privilege escalation, every capability
dropped), and launches a PyTorchJob with a Worker whose every container gets a compliant securityContext from the
step's ``security_context`` input; training-operator runs with an init container template that secures its
``init-pytorch`` (what an admin gives it: tests/controlplane/test_launch_pod_security.py). The kubelet runs every
container as the UID the input names, under RuntimeDefault seccomp with no capabilities, and the job runs to
Succeeded: the Worker's init-pytorch resolves the Master's name, the Worker reaches the Master, both write to the
shared volume."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane import node_launch, node_net, node_pods
from testbed.controlplane.cluster import ControlPlane
from testbed.pod_security import RESTRICTED, secured_init_template

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "restricted"
LEVEL = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
# What each replica ran as, beside what it heard: the UID and the capabilities the kernel gave it.
REPLICA = (
    node_launch.REPLICA
    + "\nstatus = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)"
    + "\n(model / f'ran-as-{rank}.txt').write_text("
    + "json.dumps({'uid': os.getuid(), 'CapEff': status['CapEff'].strip(), 'Seccomp': status['Seccomp'].strip(),"
    + " 'NoNewPrivs': status['NoNewPrivs'].strip()}))\n"
)
# The step's own pod, as a restricted namespace admits it.
STEP_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
STEP_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture(scope="module")
def shared(node_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("restricted")
    with node_cluster.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": NS, "labels": LEVEL}})
        node_launch.share(api_client, folder, NS)
    with node_cluster.operator_redeployed("training-operator", *secured_init_template()):
        yield folder


def _worker(core: Any, run: str) -> Any:
    pods = [p for p in core.list_namespaced_pod(NS).items if run in p.metadata.name and "-worker-" in p.metadata.name]
    return pods[0] if pods else None


def test_a_pytorchjob_with_a_worker_runs_to_succeeded_in_a_restricted_namespace(core: Any, shared: Path) -> None:
    run, name = "secure-1", "secure-launch"
    manifest = node_launch.step_pod(
        name,
        run,
        1,
        REPLICA,
        inputs={"security_context": RESTRICTED},
        container={"securityContext": STEP_CONTAINER_SECURITY},
        securityContext=STEP_POD_SECURITY,
    )
    core.create_namespaced_pod(NS, manifest)
    # The Worker as the operator made it and the API server admitted it (read while it lives).
    worker = node_launch.wait_until("the Worker's pod", lambda: _worker(core, run), 180)
    pod, took = node_pods.wait_for(core, name, NS, node_pods.ended, timeout_s=300)
    log = core.read_namespaced_pod_log(name, NS)
    print(f"the step's pod ended in {took:.1f} s\n{log[-3000:]}")
    assert pod.status.phase == "Succeeded", log
    assert "succeeded in" in log and "Wrote executor output file" in log, log
    (init,) = worker.spec.init_containers
    assert init.name == "init-pytorch" and init.security_context.allow_privilege_escalation is False
    assert worker.spec.security_context.run_as_non_root and worker.spec.security_context.run_as_user == 1000
    model = shared / run / "model"
    heard = (model / "rank-0.txt").read_text()
    said, _, address = heard.rpartition(" via ")
    assert said == "worker 1" and ipaddress.ip_address(address) in node_net.NETWORK, heard
    assert (model / "rank-1.txt").read_text() == "master"
    # The kubelet ran each replica as the input's UID, with no capability, no new privileges, under seccomp
    # (Seccomp 2: filter mode, the runtime's default profile).
    for rank in (0, 1):
        ran = (model / f"ran-as-{rank}.txt").read_text()
        assert ran == '{"uid": 1000, "CapEff": "0000000000000000", "Seccomp": "2", "NoNewPrivs": "1"}', ran

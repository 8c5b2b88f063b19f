"""Real pods on the real node (containerd, runc, the kubelet): what the node agent declares, as a kubelet reports
it. The launch image runs a compiled component's command (KFP's executor entry) as a pod and its log shows what the
step printed; a program's exit code, and OOMKilled under a memory limit, come back in the container's terminated
state; a pod deleted with a grace period gets SIGTERM inside its container before the grace runs out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from testbed import REPO_ROOT
from testbed.controlplane import node_pods

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"
FAIL_COMPONENT = REPO_ROOT / "components" / "control" / "fail" / "component.yaml"


def _create(core: Any, manifest: dict[str, Any]) -> str:
    core.create_namespaced_pod(NS, manifest)
    return str(manifest["metadata"]["name"])


def test_launch_image_runs_a_compiled_components_executor_entry(core: Any) -> None:
    image, command, args = node_pods.component_container(
        FAIL_COMPONENT, {"message": "stopped on purpose by the node tier", "value": "x1"}
    )
    assert image == node_pods.LAUNCH_IMAGE
    assert "kfp.dsl.executor_main" in " ".join(command)
    began = time.monotonic()
    name = _create(core, node_pods.pod("step-fail", image, command, args))
    _, to_running = node_pods.wait_for(core, name, NS, lambda p: p.status.phase != "Pending")
    pod, _ = node_pods.wait_for(core, name, NS, node_pods.ended)
    log = core.read_namespaced_pod_log(name, NS)
    print(f"pod created to not Pending: {to_running:.2f} s; to ended: {time.monotonic() - began:.2f} s")
    assert "ERROR: stopped on purpose by the node tier (got 'x1')" in log, log
    state = node_pods.terminated(pod)
    assert (state.exit_code, state.reason, pod.status.phase) == (2, "Error", "Failed")


def test_exit_code_as_the_kubelet_reports_it(core: Any) -> None:
    name = _create(core, node_pods.pod("exit-3", node_pods.LAUNCH_IMAGE, ["python", "-c", "import sys; sys.exit(3)"]))
    pod, _ = node_pods.wait_for(core, name, NS, node_pods.ended)
    state = node_pods.terminated(pod)
    assert (state.exit_code, state.reason, pod.status.phase) == (3, "Error", "Failed")


def test_oom_killed_under_a_memory_limit(core: Any) -> None:
    program = "b = []\nwhile True: b.append(bytearray(16 << 20))"
    limits = {"resources": {"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}}
    name = _create(core, node_pods.pod("oom", node_pods.LAUNCH_IMAGE, ["python", "-c", program], container=limits))
    pod, _ = node_pods.wait_for(core, name, NS, node_pods.ended)
    state = node_pods.terminated(pod)
    assert (state.exit_code, state.reason) == (137, "OOMKilled")


def test_delete_with_a_grace_period_sends_sigterm_into_the_container(core: Any, tmp_path: Path) -> None:
    program = (
        "import signal, sys, time\n"
        "def term(signum, frame):\n"
        "    open('/out/signal', 'w').write(signal.Signals(signum).name)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "open('/out/started', 'w').write('yes')\n"
        "while True: time.sleep(0.1)\n"
    )
    tmp_path.chmod(0o777)
    manifest = node_pods.pod(
        "grace",
        node_pods.LAUNCH_IMAGE,
        ["python", "-c", program],
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        volumes=[{"name": "out", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
        terminationGracePeriodSeconds=60,
    )
    name = _create(core, manifest)
    node_pods.wait_for(core, name, NS, node_pods.running)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    core.delete_namespaced_pod(name, NS, grace_period_seconds=30)
    took = node_pods.gone(core, name, NS)
    # Killed at the grace's end it would have taken 30 s and written nothing.
    assert (tmp_path / "signal").read_text() == "SIGTERM"
    assert took < 30, took

"""Failures before or between a container's runs, as the kubelet reports them on a real node: an image it may not
pull (ErrImageNeverPull: nothing is ever pulled here), an env var from a missing Secret
(CreateContainerConfigError), and a container that keeps failing (CrashLoopBackOff, restarts counted, the last
attempt's exit code and log)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.controlplane import node_pods

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"


def _waiting_reason(pod: Any) -> str:
    statuses = pod.status.container_statuses or []
    waiting = statuses[0].state.waiting if statuses else None
    return str(waiting.reason) if waiting else ""


def _restarts(pod: Any) -> int:
    return int(pod.status.container_statuses[0].restart_count)


def test_an_image_not_on_the_node_is_never_pulled(core: Any) -> None:
    core.create_namespaced_pod(NS, node_pods.pod("no-image", "docker.io/kftrain/not-built:0.0.0", ["true"]))
    pod, _ = node_pods.wait_for(core, "no-image", NS, lambda p: _waiting_reason(p) == "ErrImageNeverPull", 60)
    assert pod.status.phase == "Pending"


def test_a_missing_secret_is_create_container_config_error(core: Any) -> None:
    env = {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]}
    core.create_namespaced_pod(NS, node_pods.pod("no-secret", node_pods.LAUNCH_IMAGE, ["true"], container=env))
    pod, _ = node_pods.wait_for(core, "no-secret", NS, lambda p: _waiting_reason(p) == "CreateContainerConfigError", 60)
    assert 'secret "absent" not found' in pod.status.container_statuses[0].state.waiting.message


def test_crash_loop_back_off_keeps_the_previous_attempts_log(core: Any) -> None:
    program = "import time; print('attempt at', time.time(), flush=True); raise SystemExit(4)"
    manifest = node_pods.pod("crash-loop", node_pods.LAUNCH_IMAGE, ["python", "-c", program], restartPolicy="Always")

    def looping(pod: Any) -> bool:
        statuses = pod.status.container_statuses or []
        return bool(statuses) and statuses[0].restart_count >= 1 and _waiting_reason(pod) == "CrashLoopBackOff"

    core.create_namespaced_pod(NS, manifest)
    while True:  # both logs read within one back-off (the next attempt would be a third log)
        pod, _ = node_pods.wait_for(core, "crash-loop", NS, looping, 120)
        previous = core.read_namespaced_pod_log("crash-loop", NS, previous=True)
        latest = core.read_namespaced_pod_log("crash-loop", NS)
        after = core.read_namespaced_pod("crash-loop", NS)
        if looping(after) and after.status.container_statuses[0].restart_count == _restarts(pod):
            break
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 4
    assert previous.startswith("attempt at "), previous
    # While the container waits out its back-off, both name the last attempt that ended: `previous` reads the last
    # termination, and so does a plain read when nothing runs (kubernetes@v1.36.3:pkg/kubelet/kubelet_pods.go:1528-
    # 1570, validateContainerLogStatus). The attempt before it is not served.
    assert previous == latest

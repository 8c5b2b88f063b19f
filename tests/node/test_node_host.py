"""The host as the node found it: what a kubelet, containerd and the CNI plugins change outside the fixture's folder
(sysctls, mounts, kubepods cgroups, fixed folders, links, iptables) is seen while the node runs and gone once it
stops; :mod:`testbed.controlplane.node_host` reports a change and undoes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client

from testbed.controlplane import node_host, node_pods
from testbed.controlplane.cluster import control_plane
from testbed.controlplane.node_config import PAUSE_IMAGE

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]


@pytest.fixture(autouse=True)
def _node_can_run() -> None:
    why = node_pods.missing()
    if why:
        pytest.skip(why)


def test_a_change_is_reported_then_undone() -> None:
    before = node_host.snapshot()
    panic = Path("/proc/sys/kernel/panic")
    cgroup = node_host.CGROUP_ROOT / "pids" / "kubepods-kftrain-node-host-test"
    log_link = Path("/var/log/containers/kftrain-node-host-test.log")
    was_there = Path("/var/log/containers").exists()
    try:
        panic.write_text(str(int(before.sysctls["kernel.panic"]) + 7))
        cgroup.mkdir()
        log_link.parent.mkdir(exist_ok=True)
        log_link.symlink_to("/nonexistent")
        found = node_host.differences(before, node_host.snapshot())
        assert (
            f"sysctl kernel.panic = {int(before.sysctls['kernel.panic']) + 7} (was {before.sysctls['kernel.panic']})"
            in found
        )
        assert f"cgroup added: {cgroup}" in found
        assert f"path added: {log_link}" in found
        assert node_host.restore(before) == []
    finally:
        panic.write_text(before.sysctls["kernel.panic"])
        if cgroup.exists():
            cgroup.rmdir()
        if log_link.is_symlink():
            log_link.unlink()
        if not was_there and Path("/var/log/containers").exists():
            os.rmdir("/var/log/containers")
    assert node_host.differences(before, node_host.snapshot()) == []


def test_the_node_changes_the_host_while_it_runs_and_leaves_it_as_found() -> None:
    before = node_host.snapshot()
    with control_plane(node_images=[]) as plane, plane.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespaced_pod("default", node_pods.pod("pause", PAUSE_IMAGE, [], []))
        node_pods.wait_for(core, "pause", "default", node_pods.running)
        during = node_host.differences(before, node_host.snapshot())
        # What the kubelet sets (kernel.panic to 10, when it was not), its kubepods cgroups, the bridge.
        if before.sysctls["kernel.panic"] != "10":
            assert any(line.startswith("sysctl kernel.panic = 10") for line in during), during
        assert any(line.startswith("cgroup added:") and "kubepods" in line for line in during), during
        assert any(line.startswith("link added: kftrain") for line in during), during
        # kube-proxy's nat chains (node_proxy.py).
        assert any(line.startswith("iptables-save: added :KUBE-SERVICES") for line in during), during
    assert node_host.differences(before, node_host.snapshot()) == []

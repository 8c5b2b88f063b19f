"""Pods on the control plane's real node (node.py), for the node tier: the module fixture (:func:`for_tests`, a skip
in one line naming what is missing), a pod manifest that never pulls, the container a compiled component gives
(its command and args with ``{{$}}`` as KFP's launcher replaces it), and waits on what the kubelet reports."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from kftrain import images
from testbed.controlplane.cluster import BUILD_HINT, ControlPlane, control_plane, missing_binaries
from testbed.controlplane.node import TOOLS

INSTALL_HINT = "scripts/install_node_tools.sh"
# The image the node tier's pods run (a step's own image: python, kfp, kftrain).
LAUNCH_IMAGE = images.image(images.LAUNCH)


def missing() -> str:
    """Why the node cannot run here, or ''."""
    if os.geteuid() != 0:
        return "the node needs root (mounts, cgroups, a bridge)"
    tools = [t for t in TOOLS if shutil.which(t) is None]
    if tools:
        return f"{', '.join(tools)} not installed: run {INSTALL_HINT}"
    binaries = missing_binaries(with_controller_manager=True, with_node=True)
    if binaries:
        return f"{', '.join(binaries)} not built: run {BUILD_HINT}"
    return ""


def for_tests(images: Sequence[str], operators: Sequence[str] = ()) -> Iterator[ControlPlane]:
    """A test module's control plane with a node holding ``images`` (each built by `make images`, else a skip), and
    ``operators`` running."""
    import pytest

    from testbed.controlplane.node_images import image_exists
    from testbed.dockerfiles import image_env

    why = missing()
    if why:
        pytest.skip(why)
    env = image_env()
    absent = [ref for ref in images if not image_exists(ref, env)]
    if absent:
        pytest.skip(f"{', '.join(absent)} not built: run `make images`")
    with control_plane(node_images=images, operators=operators) as plane:
        yield plane


def pod(name: str, image: str, command: Sequence[str], args: Sequence[str] = (), **spec: Any) -> dict[str, Any]:
    """A one-container pod that never restarts and never pulls (the image must be in the node's containerd), with
    no ServiceAccount token mounted unless ``spec`` says ``automountServiceAccountToken=True``."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": list(command),
        "args": list(args),
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container], **spec},
    }


def component_container(
    component_yaml: Path, parameters: dict[str, Any], outputs: dict[str, Any] | None = None
) -> tuple[str, list[str], list[str]]:
    """(image, command, args) of the one executor a compiled component names, ``{{$}}`` replaced by an executor
    input holding ``parameters`` as KFP's launcher passes it (kubeflow/pipelines@2.5.0:backend/src/v2/component/
    launcher_v2.go, the executor input as JSON in place of the placeholder)."""
    spec = yaml.safe_load(component_yaml.read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    container = executor["container"]
    executor_input = json.dumps(
        {
            "inputs": {"parameterValues": parameters},
            "outputs": {"outputFile": "/tmp/kfp_outputs/output_metadata.json", **(outputs or {})},
        }
    )
    args = [executor_input if a == "{{$}}" else a for a in container.get("args", [])]
    return container["image"], list(container["command"]), args


def wait_for(
    api: Any, name: str, namespace: str, done: Callable[[Any], bool], timeout_s: float = 120.0
) -> tuple[Any, float]:
    """Read pod ``name`` until ``done(pod)``; the pod and the seconds it took. AssertionError at ``timeout_s``,
    with the pod's status and events."""
    began = time.monotonic()
    while True:
        current = api.read_namespaced_pod(name, namespace)
        if done(current):
            return current, time.monotonic() - began
        if time.monotonic() - began > timeout_s:
            events = api.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
            raise AssertionError(
                f"pod {name} not done in {timeout_s} s: {current.status} {[e.message for e in events]}"
            )
        time.sleep(0.1)


def terminated(pod: Any) -> Any:
    """The main container's terminated state, or None while it has not ended."""
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses and statuses[0].state.terminated else None


def ended(pod: Any) -> bool:
    """The pod's phase is terminal. The kubelet reports a container's terminated state first and the pod's phase
    only once the whole pod has stopped (its sandbox too), so the state can read terminated while the phase reads
    Running."""
    return pod.status.phase in ("Succeeded", "Failed")


def running(pod: Any) -> bool:
    return pod.status.phase == "Running"


def gone(api: Any, name: str, namespace: str, timeout_s: float = 120.0) -> float:
    """Wait until pod ``name`` is deleted (the kubelet confirmed its containers stopped); the seconds it took."""
    from kubernetes.client.exceptions import ApiException

    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        try:
            api.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return time.monotonic() - began
            raise
        time.sleep(0.1)
    raise AssertionError(f"pod {name} still there after {timeout_s} s")

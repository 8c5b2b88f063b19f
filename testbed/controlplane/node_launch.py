"""The launch step as a pod on the node tier's real node (node_pods.py): deploy/rbac's Role bound to the
`pipeline-runner` ServiceAccount, a folder the step and its job's replicas share (a hostPath PersistentVolume,
bound by kube-controller-manager), the step's pod running pytorchjob_launch's compiled command (KFP's executor
entry, in-cluster config) under a stand-in for Argo's emissary, with KFP's pod name and UID in its env, its log
followed while it runs, and the PyTorchJobs it made."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, utils

from testbed import REPO_ROOT
from testbed.controlplane import node_pods

NS = "default"
ACCOUNT = "pipeline-runner"
CLAIM = "kftrain-shared"
SHARED = "/shared"
COMPONENT = REPO_ROOT / "components" / "training" / "pytorchjob_launch" / "component.yaml"
RBAC = REPO_ROOT / "deploy" / "rbac"
# Each replica: what the operator gave it; the Master waits for one connection on MASTER_PORT, a Worker connects to
# MASTER_ADDR:MASTER_PORT (by name); each writes what it heard to the model folder.
REPLICA = """
import json, os, pathlib, socket, time
names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "KFTRAIN_MODEL_URI")
print("replica-env", json.dumps({n: os.environ.get(n) for n in names}), flush=True)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
heard = "alone"
if rank == 0 and world > 1:
    with socket.create_server(("", port)) as server:
        conn, _ = server.accept()
        heard = conn.recv(100).decode()
        conn.sendall(b"master")
        conn.close()
elif rank > 0:
    for _ in range(240):
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.5)
    conn.sendall(f"worker {rank} via {socket.gethostbyname(addr)}".encode())
    heard = conn.recv(100).decode()
    conn.close()
model = pathlib.Path(os.environ["KFTRAIN_MODEL_URI"])
model.mkdir(parents=True, exist_ok=True)
(model / f"rank-{rank}.txt").write_text(heard)
"""
# Argo's emissary, PID 1 of a step's main container, starts the step's command in a process group of its own and
# sends every signal it gets to that group (argoproj/argo-workflows@v4.0.5:cmd/argoexec/commands/emissary.go:190,
# workflow/executor/osspecific/command_unix.go:37 and signal_darwin.go:19-24, which signal_linux.go links to). Run as
# PID 1 itself, KFP's compiled `sh -ec '...; python3 -m kfp.dsl.executor_main ...'` would never pass the kubelet's
# SIGTERM on: dash 0.5.12 forks python there rather than exec it, and PID 1 ignores a signal it has no handler for
# (finding N12). This stand-in signals the group as the emissary does, then waits for every process of it, where
# the emissary waits for its child alone (signal_darwin.go:31-62): here the step's handler runs to its end.
EMISSARY = """
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:], process_group=0)
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, lambda signum, frame: os.killpg(child.pid, signum))
code = 0
while True:  # PID 1: the group's orphans are reparented here
    try:
        code = os.waitstatus_to_exitcode(os.waitpid(-1, 0)[1])
    except ChildProcessError:
        break
sys.exit(128 - code if code < 0 else code)
"""
PYTORCHJOBS = {"group": "kubeflow.org", "version": "v1", "plural": "pytorchjobs"}


def share(api_client: Any, folder: Path, namespace: str = NS) -> None:
    """In ``namespace``: the `pipeline-runner` ServiceAccount with deploy/rbac's Role, and the claim CLAIM on a
    hostPath volume of ``folder`` (open to every user: a replica may run as any UID), bound to that claim alone."""
    folder.chmod(0o777)
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": ACCOUNT}})
    for name in ("role.yaml", "rolebinding-pipeline-runner.yaml"):
        utils.create_from_yaml(api_client, str(RBAC / name), namespace=namespace)
    spec = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    volume = {
        "metadata": {"name": f"{CLAIM}-{namespace}"},
        "spec": {
            **spec,
            "capacity": {"storage": "1Gi"},
            "hostPath": {"path": str(folder), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": CLAIM},
        },
    }
    core.create_persistent_volume(volume)
    claim = {"metadata": {"name": CLAIM}, "spec": {**spec, "resources": {"requests": {"storage": "1Gi"}}}}
    core.create_namespaced_persistent_volume_claim(namespace, claim)


def step_pod(
    name: str, run: str, workers: int, replica: str = REPLICA, *, inputs: dict[str, Any] | None = None, **pod: Any
) -> dict[str, Any]:
    """The pytorchjob_launch step's pod: its job's replicas run ``replica`` in the launch image, its outputs go to
    the shared claim; ``inputs`` add to or replace the step's inputs, ``pod`` to the pod's spec (``metadata``: to
    its metadata)."""
    parameters = {
        "command": ["python", "-c", replica],
        "image": node_pods.LAUNCH_IMAGE,
        "workers": workers,
        "backend": "kubernetes",
        "run_id": run,
        "task_id": "launch",
        "pvc_mounts": {SHARED: CLAIM},
        "timeout_seconds": 240,
        "pending_timeout_seconds": 120,
        **(inputs or {}),
    }
    artifact = {"name": "", "metadata": {}}
    outputs = {
        "artifacts": {
            name: {"artifacts": [{**artifact, "type": {"schemaTitle": kind}, "uri": f"{SHARED}/{run}/{name}"}]}
            for name, kind in (("model", "system.Model"), ("metrics", "system.Metrics"), ("curves", "system.HTML"))
        },
        "parameters": {"job": {"outputFile": "/tmp/kfp_outputs/job"}},
    }
    image, command, args = node_pods.component_container(COMPONENT, parameters, outputs)
    field = [("KFP_POD_NAME", "metadata.name"), ("KFP_POD_UID", "metadata.uid")]
    env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": path}}} for n, path in field]
    container = {"env": env, "volumeMounts": [{"name": "shared", "mountPath": SHARED}], **pod.pop("container", {})}
    metadata = pod.pop("metadata", {})
    manifest = node_pods.pod(
        name,
        image,
        ["python", "-c", EMISSARY, *command],
        args,
        container=container,
        volumes=[{"name": "shared", "persistentVolumeClaim": {"claimName": CLAIM}}],
        serviceAccountName=ACCOUNT,
        automountServiceAccountToken=True,
        **pod,
    )
    manifest["metadata"].update(metadata)
    return manifest


class FollowedLog:
    """A pod's log, followed from its container's start until the container ends (the stream closes then), so what
    a container said before its pod object is deleted is kept."""

    def __init__(self, core: Any, name: str, namespace: str = NS) -> None:
        self._chunks: list[str] = []
        self._thread = threading.Thread(target=self._follow, args=(core, name, namespace), daemon=True)
        self._thread.start()

    def _follow(self, core: Any, name: str, namespace: str) -> None:
        stream = core.read_namespaced_pod_log(name, namespace, follow=True, _preload_content=False)
        for chunk in stream.stream(amt=4096, decode_content=True):
            self._chunks.append(chunk.decode(errors="replace"))

    def text(self, timeout_s: float = 0.0) -> str:
        """What was said so far; with ``timeout_s``, once the stream closed (the container ended) or then."""
        self._thread.join(timeout_s)
        return "".join(self._chunks)


def follow(core: Any, name: str, namespace: str = NS) -> FollowedLog:
    """Follow pod ``name``'s log once its container runs."""
    node_pods.wait_for(core, name, namespace, lambda p: p.status.phase != "Pending", timeout_s=120)
    return FollowedLog(core, name, namespace)


def jobs_of(custom: Any, run: str, namespace: str = NS) -> list[dict[str, Any]]:
    """The PyTorchJobs of run ``run`` (the step's labels name it)."""
    items = custom.list_namespaced_custom_object(namespace=namespace, **PYTORCHJOBS)["items"]
    return [j for j in items if run in str(j["metadata"].get("labels") or {}) or run in j["metadata"]["name"]]


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    """``check()`` once it is truthy; AssertionError naming ``what`` at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.2)

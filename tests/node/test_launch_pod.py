"""The launch step as a pod on the real node: the launch image runs pytorchjob_launch's compiled command (KFP's
executor entry) under deploy/rbac's Role, bound to the `pipeline-runner` ServiceAccount, with in-cluster config; the
real training-operator makes the PyTorchJob's pods, which run on the same node with the operator's env and write the
model to a volume the step's pod shares (a hostPath PersistentVolume, bound by kube-controller-manager)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, utils

from testbed import REPO_ROOT
from testbed.controlplane import node_pods
from testbed.controlplane.cluster import ControlPlane

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"
ACCOUNT = "pipeline-runner"
CLAIM = "kftrain-shared"
SHARED = "/shared"
COMPONENT = REPO_ROOT / "components" / "training" / "pytorchjob_launch" / "component.yaml"
RBAC = REPO_ROOT / "deploy" / "rbac"
# Each replica: what the operator gave it, then a model where the step said.
REPLICA = """
import json, os, pathlib
names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "KFTRAIN_MODEL_URI")
print("replica-env", json.dumps({n: os.environ.get(n) for n in names}), flush=True)
model = pathlib.Path(os.environ["KFTRAIN_MODEL_URI"])
model.mkdir(parents=True, exist_ok=True)
(model / f"rank-{os.environ['RANK']}.txt").write_text(os.environ["WORLD_SIZE"])
"""


def _shared_claim(api_client: Any, folder: Path) -> None:
    core = client.CoreV1Api(api_client)
    spec = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    volume = {
        "metadata": {"name": CLAIM},
        "spec": {**spec, "capacity": {"storage": "1Gi"}, "hostPath": {"path": str(folder), "type": "Directory"}},
    }
    core.create_persistent_volume(volume)
    claim = {"metadata": {"name": CLAIM}, "spec": {**spec, "resources": {"requests": {"storage": "1Gi"}}}}
    core.create_namespaced_persistent_volume_claim(NS, claim)


def _step_pod(run: str) -> dict[str, Any]:
    parameters = {
        "command": ["python", "-c", REPLICA],
        "image": node_pods.LAUNCH_IMAGE,
        "workers": 0,
        "backend": "kubernetes",
        "run_id": run,
        "task_id": "launch",
        "pvc_mounts": {SHARED: CLAIM},
        "timeout_seconds": 240,
        "pending_timeout_seconds": 120,
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
    return node_pods.pod(
        "launch",
        image,
        command,
        args,
        container={"env": env, "volumeMounts": [{"name": "shared", "mountPath": SHARED}]},
        volumes=[{"name": "shared", "persistentVolumeClaim": {"claimName": CLAIM}}],
        serviceAccountName=ACCOUNT,
        automountServiceAccountToken=True,
    )


def test_the_launch_step_runs_a_pytorchjob_on_the_node(node_cluster: ControlPlane, core: Any, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    with node_cluster.api_client() as api_client:
        core.create_namespaced_service_account(NS, {"metadata": {"name": ACCOUNT}})
        for name in ("role.yaml", "rolebinding-pipeline-runner.yaml"):
            utils.create_from_yaml(api_client, str(RBAC / name), namespace=NS)
        _shared_claim(api_client, tmp_path)
    core.create_namespaced_pod(NS, _step_pod("run-1"))
    pod, took = node_pods.wait_for(core, "launch", NS, node_pods.ended, timeout_s=300)
    log = core.read_namespaced_pod_log("launch", NS)
    print(f"the step's pod ended in {took:.1f} s\n{log[-3000:]}")
    assert pod.status.phase == "Succeeded", log
    (master,) = [p for p in core.list_namespaced_pod(NS).items if p.metadata.name.endswith("-master-0")]
    assert master.spec.node_name == "kftrain-node"
    line = next(x for x in core.read_namespaced_pod_log(master.metadata.name, NS).splitlines() if "replica-env" in x)
    env = json.loads(line.split(" ", 1)[1])
    job = master.metadata.labels["training.kubeflow.org/job-name"]
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["RANK"]) == (f"{job}-master-0", "1", "0"), env
    assert (tmp_path / "run-1" / "model" / "rank-0.txt").read_text() == "1"
    assert "succeeded in" in log and "Wrote executor output file" in log, log

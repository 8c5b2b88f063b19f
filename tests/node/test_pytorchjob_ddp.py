"""A 2-replica PyTorchJob through the real training-operator on the real node: the Worker's `init-pytorch` (BIND's
nslookup, node_images.INIT_IMAGE, given to the operator by --pytorch-init-container-image) waits while the Master's
name does not resolve and ends once it does; then the project's PyTorch image runs torch_ddp over gloo on both pods
(the Worker finds the Master by the name the operator gives it), and the Master writes the model to the local S3,
which pods reach through a relay on the node's bridge (node_s3.py). The image is moved into the node once (GBs;
kept in the node's cache after)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kftrain import images
from testbed.controlplane import node_pods, node_s3
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.node import Node
from testbed.controlplane.node_images import containerd_images, image_exists, import_images
from testbed.dockerfiles import image_env
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer, boto3_client

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.xdist_group("node")]

NS = "default"
BUCKET = "kftrain-node"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
# Disk an import must leave free: the image's compressed layers and its unpacked snapshots stay in the node's cache.
FLOOR_BYTES = 8 << 30
ABSENT_IMAGE = "localhost/kftrain/absent:0"


def _pytorch_image(env: dict[str, str]) -> str:
    """The project's PyTorch image, the CPU variant when built (smaller), else CUDA (it runs on the CPU too)."""
    refs = [images.image(images.PYTORCH, v) for v in (images.CPU, images.CUDA)]
    built = [ref for ref in refs if image_exists(ref, env)]
    if not built:
        pytest.skip(f"none of {', '.join(refs)} built: run `make images`")
    return built[0]


@pytest.fixture(scope="module")
def pytorch_image(node_cluster: ControlPlane) -> str:
    """The PyTorch image in the node's containerd; a skip when importing it would leave under 8 GiB free."""
    env = image_env()
    ref = _pytorch_image(env)
    node = node_cluster.parts["node"]
    assert isinstance(node, Node)
    if ref not in containerd_images(node.paths.socket):
        inspect = ["podman", "image", "inspect", "--format", "{{.Size}}", ref]
        size = int(subprocess.run(inspect, env=env, capture_output=True, text=True, check=True).stdout)
        free = shutil.disk_usage(node.paths.root).free
        if free - 2 * size < FLOOR_BYTES:
            pytest.skip(f"moving {ref} ({size >> 20} MiB) into the node would leave under 8 GiB free")
    took = import_images(node.paths.socket, [ref], env, node.paths.root / "images", node.store)
    print(f"{ref} in the node ({took[ref]:.1f} s)")
    return ref


@pytest.fixture(scope="module")
def s3(node_cluster: ControlPlane) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh local S3 with a bucket: its loopback endpoint, and the env a pod reads it with (the relay on the node's
    bridge)."""
    node = node_cluster.parts["node"]
    assert isinstance(node, Node)
    with MotoServer() as server, node_s3.relay(node.apiserver_address, server.port) as port:
        boto3_client(server.endpoint).create_bucket(Bucket=BUCKET)
        credentials = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        env = {"AWS_ENDPOINT_URL": f"http://{node.apiserver_address}:{port}", **credentials}
        yield server.endpoint, {**env, "AWS_DEFAULT_REGION": "us-east-1"}


def _job(name: str, master: dict[str, Any], worker: dict[str, Any]) -> dict[str, Any]:
    def replica(container: dict[str, Any]) -> dict[str, Any]:
        base = {"name": "pytorch", "imagePullPolicy": "Never"}
        spec = {"containers": [{**base, **container}], "terminationGracePeriodSeconds": 1}
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": spec}}

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
            "pytorchReplicaSpecs": {"Master": replica(master), "Worker": replica(worker)},
        },
    }


def _condition(custom: Any, name: str) -> str:
    job = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    conditions = job.get("status", {}).get("conditions") or []
    return next((c["type"] for c in reversed(conditions) if c["status"] == "True"), "")


def _init_state(pod: Any) -> Any:
    (status,) = pod.status.init_container_statuses or [None]
    return status.state if status else None


def _created(core: Any, name: str, timeout_s: float = 60.0) -> None:
    """Wait until the operator has created pod ``name``."""
    began = time.monotonic()
    while not core.list_namespaced_pod(NS, field_selector=f"metadata.name={name}").items:
        assert time.monotonic() - began < timeout_s, f"the operator made no pod {name} in {timeout_s} s"
        time.sleep(0.2)


def _delete(custom: Any, core: Any, name: str) -> None:
    """Delete the job, and its pods (cleanPodPolicy None keeps them) once the kubelet has stopped them."""
    from kubernetes.client.exceptions import ApiException

    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, propagation_policy="Foreground")
    for suffix in ("master-0", "worker-0"):
        pod = f"{name}-{suffix}"
        try:
            core.delete_namespaced_pod(pod, NS, grace_period_seconds=1)
        except ApiException as e:
            if e.status != 404:
                raise
        node_pods.gone(core, pod, NS)


def test_init_pytorch_waits_for_the_masters_name_then_ends(node_cluster: ControlPlane, core: Any) -> None:
    """The Master's image is absent at first (ErrImageNeverPull: never Ready, so its headless Service has no
    address and its name is NXDOMAIN): the Worker's init-pytorch keeps waiting. The Master's image is then set to one
    the node holds; once it runs, its name resolves and init-pytorch exits 0, and the Worker's container starts."""
    name = "init-wait"
    with node_cluster.api_client() as api_client:
        custom = client.CustomObjectsApi(api_client)
        master = {"image": ABSENT_IMAGE, "command": ["sleep", "300"]}
        worker = {"image": node_pods.LAUNCH_IMAGE, "command": ["python", "-c", "print('worker started')"]}
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, _job(name, master, worker))
        try:
            _created(core, f"{name}-worker-0")
            pod, _ = node_pods.wait_for(core, f"{name}-worker-0", NS, lambda p: bool(_init_state(p)), timeout_s=60)
            time.sleep(8)
            pod = core.read_namespaced_pod(f"{name}-worker-0", NS)
            waited = core.read_namespaced_pod_log(pod.metadata.name, NS, container="init-pytorch")
            assert _init_state(pod).running is not None, (pod.status, waited)
            assert waited.count("waiting for master") >= 2, waited
            assert pod.status.container_statuses[0].state.waiting is not None, pod.status
            core.patch_namespaced_pod(
                f"{name}-master-0", NS, {"spec": {"containers": [{"name": "pytorch", "image": node_pods.LAUNCH_IMAGE}]}}
            )
            pod, took = node_pods.wait_for(core, pod.metadata.name, NS, node_pods.ended, timeout_s=90)
            log = core.read_namespaced_pod_log(pod.metadata.name, NS, container="init-pytorch")
            print(f"the Worker ended {took:.1f} s after the Master's image was set; init-pytorch:\n{log[-3000:]}")
            done = _init_state(pod).terminated
            assert (done.exit_code, done.reason) == (0, "Completed"), (done, log)
            assert f"{name}-master-0.{NS}.svc.cluster.local" in log, log
            assert pod.status.phase == "Succeeded", pod.status
            assert core.read_namespaced_pod_log(pod.metadata.name, NS, container="pytorch").strip() == "worker started"
        finally:
            _delete(custom, core, name)


def test_a_two_replica_pytorchjob_trains_with_ddp_and_writes_the_model_to_s3(
    node_cluster: ControlPlane, core: Any, pytorch_image: str, s3: tuple[str, dict[str, str]]
) -> None:
    from kftrain.steps.prep import prepare_dataset

    name = "ddp"
    loopback, pod_env = s3
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**pod_env, "AWS_ENDPOINT_URL": loopback}.items():
            patch.setenv(key, value)
        prepare_dataset(f"s3://{BUCKET}/digits", seed=42)
    program = ["python", "-m", "kftrain.programs.torch_ddp", "--dataset", f"s3://{BUCKET}/digits"]
    program += ["--model-dir", f"s3://{BUCKET}/model", "--epochs", "2", "--backend", "gloo"]
    container = {
        "image": pytorch_image,
        "command": program,
        "env": [{"name": k, "value": v} for k, v in pod_env.items()],
    }
    with node_cluster.api_client() as api_client:
        custom = client.CustomObjectsApi(api_client)
        began = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, _job(name, container, container))
        try:
            while _condition(custom, name) not in ("Succeeded", "Failed"):
                assert time.monotonic() - began < 420, custom.get_namespaced_custom_object(
                    GROUP, VERSION, NS, PLURAL, name
                )
                time.sleep(1)
            took = time.monotonic() - began
            logs = {
                s: core.read_namespaced_pod_log(f"{name}-{s}", NS, container="pytorch")
                for s in ("master-0", "worker-0")
            }
            init = core.read_namespaced_pod_log(f"{name}-worker-0", NS, container="init-pytorch")
            print(f"PyTorchJob {name} ended in {took:.1f} s\ninit-pytorch:\n{init[-1500:]}")
            for replica, log in logs.items():
                print(f"--- {replica}\n{log[-3000:]}")
            assert _condition(custom, name) == "Succeeded", logs
            assert all("INFO world size 2:" in log for log in logs.values()), logs
            assert "rank 0/2:" in logs["master-0"], logs["master-0"]
            assert "rank 1/2:" in logs["worker-0"], logs["worker-0"]
            assert f"model written to s3://{BUCKET}/model" in logs["master-0"], logs["master-0"]
            worker = core.read_namespaced_pod(f"{name}-worker-0", NS)
            assert _init_state(worker).terminated.exit_code == 0
            written = boto3_client(loopback).list_objects_v2(Bucket=BUCKET, Prefix="model/")
            keys = sorted(o["Key"] for o in written.get("Contents", []))
            print(f"model objects: {keys}")
            assert keys, written
        finally:
            _delete(custom, core, name)

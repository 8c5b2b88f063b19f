"""What the tests of the launch step's life on the real control plane share (tests/controlplane/test_launch_life.py,
test_launch_pod_security.py): its namespaces, the launcher pod a KFP task runs in, the step run beside an action
of the test's in another thread, and what the test reads of the job and its pods, or waits for."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import load_identity
from kftrain.job.kinds import KINDS
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.namespaces import install_cluster_runtimes, ready_namespace
from testbed.controlplane.node_agent import SUCCEED, NodeAgent
from testbed.launch_cluster import LAUNCHES, Launch
from testbed.launch_harness import SETTINGS

NAMESPACE = "kftrain-life"
# Namespaces that enforce a Pod Security Standard (kubernetes@v1.36.3:staging/src/k8s.io/pod-security-admission/api/
# constants.go, EnforceLevelLabel), by level.
ENFORCING = {level: f"kftrain-psa-{level}" for level in ("baseline", "restricted")}
WAIT_S = 90.0
LAUNCHER_LABEL = {"kftrain-test": "launcher"}
# Each kind's component given typed inputs, without the platform settings a test cluster has nothing for (a
# PriorityClass, a Volcano queue, a GPU node pool, Secrets to mount).
TYPED = [dataclasses.replace(launch, not_taken=tuple(SETTINGS)) for launch in LAUNCHES if launch.source == "typed"]


def prepare(api_client: Any) -> None:
    """The namespaces (:data:`NAMESPACE`, and one enforcing each level of :data:`ENFORCING`), and Trainer's
    ClusterTrainingRuntimes."""
    ready_namespace(api_client, NAMESPACE)
    for level, namespace in ENFORCING.items():
        ready_namespace(api_client, namespace, {"pod-security.kubernetes.io/enforce": level})
    install_cluster_runtimes(api_client)


def use_namespace(cluster: ControlPlane, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The admin's kubeconfig with ``namespace`` as its context's (where the step creates its job), named by
    KUBECONFIG; not in a pod."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def launcher_pod(api_client: Any, name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    """A running pod standing for the KFP task's launcher pod; its uid. With ``monkeypatch``, the step's environment
    names it, as the KFP backend's driver sets KFP_POD_NAME and KFP_POD_UID
    (kubeflow/pipelines@2.17.0:backend/src/v2/driver/driver.go, the pod spec patch's downward API env)."""
    pod = {
        "metadata": {"name": name, "labels": LAUNCHER_LABEL},
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/kubeflow/kfp-launcher:2.17.0"}]},
    }
    created = client.CoreV1Api(api_client).create_namespaced_pod(NAMESPACE, pod)
    uid = str(created.metadata.uid)
    if monkeypatch is not None:
        monkeypatch.setenv("KFP_POD_NAME", name)
        monkeypatch.setenv("KFP_POD_UID", uid)
    return uid


def owned_by(name: str, uid: str) -> dict[str, Any]:
    """A ConfigMap owned by pod ``name`` alone: once the garbage collector has deleted it, it has handled the pod's
    deletion, and whatever else that pod alone owned is gone too."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}
    return {"metadata": {"name": f"{name}-marker", "ownerReferences": [owner]}, "data": {}}


def until(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.1)


def job_pods(api_client: Any, launch: Launch, name: str, namespace: str = NAMESPACE) -> list[Any]:
    label = KINDS.get(launch.kind).spec.pod_job_label
    return list(client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=f"{label}={name}").items)


def all_running(api_client: Any, launch: Launch, name: str, namespace: str = NAMESPACE) -> list[Any]:
    pods = job_pods(api_client, launch, name, namespace)
    return pods if pods and all(p.status.phase == "Running" for p in pods) else []


def running_job(api_client: Any, launch: Launch, identity: Path, namespace: str = NAMESPACE) -> str:
    """The name of the job the step created (once it wrote the job's identity), once every pod of it runs."""
    until("the step wrote its job's identity", identity.exists)
    name = load_identity(identity).name
    until(f"every pod of {name} running", lambda: all_running(api_client, launch, name, namespace))
    return name


def get_job(api_client: Any, launch: Launch, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
    group, version = launch.api_version.split("/")
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            group, version, namespace, launch.plural, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def left_in_namespace(api_client: Any) -> dict[str, list[str]]:
    """What is left in the namespace but the launcher pods and what every namespace holds."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    pods = core.list_namespaced_pod(NAMESPACE, label_selector="kftrain-test!=launcher").items
    jobsets = custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets")["items"]
    found = {
        "pods": [p.metadata.name for p in pods],
        "services": [s.metadata.name for s in core.list_namespaced_service(NAMESPACE).items],
        "configmaps": [c.metadata.name for c in core.list_namespaced_config_map(NAMESPACE).items],
        "secrets": [s.metadata.name for s in core.list_namespaced_secret(NAMESPACE).items],
        "jobs": [j.metadata.name for j in batch.list_namespaced_job(NAMESPACE).items],
        "jobsets": [j["metadata"]["name"] for j in jobsets],
    }
    return {kind: names for kind, names in found.items() if names}


def run_step_beside(action: Callable[[], None], launch: Launch, inputs: dict[str, Any]) -> None:
    """The step's function in this thread (its SIGTERM handler is the main thread's) while ``action`` runs in
    another; an error of ``action`` is raised in the step's place, the step ended by SIGTERM, sent until it has
    ended (one sent before the step's handler was installed is only recorded: :func:`sigterm_outside_the_step`)."""
    failed: list[BaseException] = []
    ended = threading.Event()

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failed.append(exc)
            while not ended.wait(1.0):
                os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        launch.component.python_func(**inputs)
    except BaseException as exc:
        ended.set()
        thread.join(timeout=WAIT_S)
        if failed:
            raise failed[0] from exc
        raise
    ended.set()
    thread.join(timeout=WAIT_S)
    if failed:
        raise failed[0]


def fails_at_once(
    run: Callable[[], None],
    api_client: Any,
    launch: Launch,
    identity: Path,
    capsys: pytest.CaptureFixture[str],
    namespace: str = NAMESPACE,
) -> str:
    """What the step said when ``run`` (the step) ended within seconds, not after its pending timeout (600 s by
    default) or its own, having deleted its job."""
    began = time.monotonic()
    with pytest.raises(SystemExit):
        run()
    said = "".join(capsys.readouterr())
    assert time.monotonic() - began < 60, f"the step waited for a timeout: {said}"
    assert get_job(api_client, launch, load_identity(identity).name, namespace) is None, "the step left its job"
    return said


def write_model(api_client: Any, launch: Launch, name: str, namespace: str = NAMESPACE) -> None:
    """What the trainer does before it exits 0: a model where the job's KFTRAIN_MODEL_URI points (a folder here)."""
    (pod, *_) = job_pods(api_client, launch, name, namespace)
    env = {e.name: e.value for c in pod.spec.containers for e in c.env or []}
    Path(env["KFTRAIN_MODEL_URI"]).mkdir(parents=True, exist_ok=True)
    (Path(env["KFTRAIN_MODEL_URI"]) / "model.bin").write_bytes(b"weights")


def succeed(api_client: Any, node: NodeAgent, launch: Launch, name: str, namespace: str = NAMESPACE) -> None:
    write_model(api_client, launch, name, namespace)
    for pod in job_pods(api_client, launch, name, namespace):
        node.decide(namespace, pod.metadata.name, SUCCEED)


def empty_namespace(api: Any) -> None:
    """Delete the launcher pods and every job of :data:`NAMESPACE`; wait until what the operators made is gone."""
    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector="kftrain-test=launcher", grace_period_seconds=0)
    for launch in TYPED:
        group, version = launch.api_version.split("/")
        custom = client.CustomObjectsApi(api)
        for job in custom.list_namespaced_custom_object(group, version, NAMESPACE, launch.plural)["items"]:
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(
                    group, version, NAMESPACE, launch.plural, job["metadata"]["name"]
                )
    until("the namespace emptied after the test", lambda: not left_in_namespace(api) or None)

"""The launch step's whole life against the real control plane: kube-apiserver, kube-controller-manager (its
garbage collector and Job controller), training-operator v1.9.0, mpi-operator v0.8.2, JobSet v0.12.0 and Trainer
v2.3.0, built from Go modules (testbed/controlplane), with a node agent that runs their pods.

Each test drives the launch component's own function with the inputs a pipeline gives it (testbed/launch_cluster.py)
and the production :class:`KubernetesConfig`, finding the cluster through ``KUBECONFIG``; the launcher pod the KFP
backend would run it in is a real pod here (``KFP_POD_NAME``/``KFP_POD_UID`` name it), so the job's ownerReference
points at an object the garbage collector can look up, as on a cluster:

- a cancelled step (SIGTERM) deletes its job, and the garbage collector deletes every pod, Service, ConfigMap,
  Secret, Job and JobSet the operators made for it, through their ownerReferences;
- a step relaunched in a new pod reattaches to its job and adds its pod as an owner, so the job outlives the first
  launcher pod and goes with the last;
- the API server restarted mid-job (a control-plane upgrade): the step rides over the refused connections, its watches
  resume (or re-list on 410 Gone: the restarted server's watch cache starts empty), and it reports the job's end;
- a watch whose history etcd compacted is answered 410 Gone and re-listed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import load_identity
from kftrain.job.kinds import KINDS
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.kubeflow_operators import OPERATORS
from testbed.controlplane.namespaces import install_cluster_runtimes, ready_namespace
from testbed.controlplane.node_agent import RUN, SUCCEED, NodeAgent
from testbed.controlplane.trainer_node import node_credentials, report
from testbed.launch_cluster import LAUNCHES, Launch, start_step_process, step_inputs
from testbed.launch_harness import SETTINGS
from tests.launch.test_inputs_validation import RESTRICTED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    # One control plane per worker: keep the module's tests on one.
    pytest.mark.xdist_group("controlplane"),
]

NAMESPACE = "kftrain-life"
# Namespaces that enforce a Pod Security Standard (kubernetes@v1.36.3:staging/src/k8s.io/pod-security-admission/api/
# constants.go, EnforceLevelLabel), by level.
ENFORCING = {level: f"kftrain-psa-{level}" for level in ("baseline", "restricted")}
WAIT_S = 90.0
LAUNCHER_LABEL = {"kftrain-test": "launcher"}
# Each kind's component given typed inputs, without the platform settings a test cluster has nothing for (a
# PriorityClass, a Volcano queue, a GPU node pool, Secrets to mount).
TYPED = [dataclasses.replace(launch, not_taken=tuple(SETTINGS)) for launch in LAUNCHES if launch.source == "typed"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    yield from for_tests(operators=tuple(OPERATORS))


@pytest.fixture(scope="module")
def node(cluster: ControlPlane) -> Iterator[NodeAgent]:
    with NodeAgent(cluster, outcome=lambda pod: RUN) as agent:
        yield agent


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Iterator[Any]:
    with cluster.api_client() as api_client:
        ready_namespace(api_client, NAMESPACE)
        for level, namespace in ENFORCING.items():
            ready_namespace(api_client, namespace, {"pod-security.kubernetes.io/enforce": level})
        install_cluster_runtimes(api_client)
        yield api_client


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


@pytest.fixture
def kubeconfig(cluster: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_namespace(cluster, NAMESPACE, tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def stray_sigterm_recorded(sigterm_outside_the_step: list[int]) -> list[int]:
    """For every test: the SIGTERM :func:`run_step_beside` sends when its action fails may come once the step has
    returned, and must not end the test run."""
    return sigterm_outside_the_step


# --- what the test reads and makes on the cluster ----------------------------------------------------------------


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


@pytest.fixture(autouse=True)
def clean_namespace(api: Any) -> Iterator[None]:
    """Each test starts with nothing of an earlier one in the namespace."""
    yield
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


# --- the tests --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_a_cancelled_step_deletes_its_job_and_the_collector_everything_it_made(
    launch: Launch,
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sigterm_outside_the_step: list[int],
) -> None:
    """SIGTERM (the run cancelled, the launcher pod evicted) while every replica runs: the step deletes the job and
    exits 143; the garbage collector then deletes what the operators made for it through their ownerReferences
    (kubernetes@v1.36.3:pkg/controller/garbagecollector), background propagation being the step's
    (KubernetesConfig.propagation_policy)."""
    launcher_pod(api, "launch-step-a", monkeypatch)
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])

    def cancel_once_running() -> None:
        running_job(api, launch, identity)
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit) as ended:
        run_step_beside(cancel_once_running, launch, inputs)
    assert ended.value.code == 143
    assert sigterm_outside_the_step == []
    name = load_identity(identity).name
    assert f"deleted {launch.kind} {NAMESPACE}/{name}" in capsys.readouterr().out
    until(f"{launch.kind} {name} gone", lambda: get_job(api, launch, name) is None or None)
    until("the collector deleted what the operator made", lambda: not left_in_namespace(api) or None)


@pytest.mark.parametrize("launch", [t for t in TYPED if t.kind in ("PyTorchJob", "TrainJob")], ids=lambda t: t.kind)
def test_a_relaunched_step_reattaches_and_the_job_goes_with_its_last_launcher_pod(
    launch: Launch,
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first launcher pod's step dies once its job exists (nothing deletes the job); KFP retries the task in a
    second pod, whose step reattaches and adds its pod as an owner. The first pod deleted, the job lives on (the
    garbage collector deletes a dependent only when none of its owners exists, and drops the reference to the one
    gone); the job succeeds and the step returns; the second pod deleted, the job and its pods go."""
    first_uid = launcher_pod(api, "launch-step-a", monkeypatch)
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(NAMESPACE, owned_by("launch-step-a", first_uid))
    first = step_inputs(launch, tmp_path, job_output="job-attempt-1")
    created = _first_attempt_dies_once_its_job_exists(launch, first, tmp_path)
    second_uid = launcher_pod(api, "launch-step-b", monkeypatch)
    second = step_inputs(launch, tmp_path, job_output="job-attempt-2")

    def first_pod_goes_then_job_succeeds() -> None:
        until("the second step added its pod as an owner", lambda: second_uid in _owner_uids(api, launch, created))
        core.delete_namespaced_pod("launch-step-a", NAMESPACE, grace_period_seconds=0)
        until("the collector handled the first pod's deletion", lambda: _gone_config_map(core, "launch-step-a-marker"))
        assert get_job(api, launch, created) is not None, "the job went with its first launcher pod"
        until(f"every pod of {created} running", lambda: all_running(api, launch, created))
        succeed(api, node, launch, created)

    run_step_beside(first_pod_goes_then_job_succeeds, launch, second)
    out = capsys.readouterr().out
    assert "reattached to" in out, out
    assert load_identity(second["job"]).name == created
    # The collector removed the reference to the deleted pod and kept the job: a dependent with a solid owner left
    # loses only its dangling references (kubernetes@v1.36.3:pkg/controller/garbagecollector/garbagecollector.go,
    # attemptToDeleteItem: "remove dangling references and waiting references for item").
    owners = _owner_uids(api, launch, created)
    assert owners == [second_uid], (owners, first_uid)

    core.delete_namespaced_pod("launch-step-b", NAMESPACE, grace_period_seconds=0)
    until(f"{created} collected with its last launcher pod", lambda: get_job(api, launch, created) is None or None)
    until("its pods collected", lambda: not job_pods(api, launch, created) or None)


def _first_attempt_dies_once_its_job_exists(launch: Launch, inputs: dict[str, Any], tmp_path: Path) -> str:
    """The first attempt's step in a process of its own, killed (SIGKILL: its pod died) once it has created its job
    and written the job's identity; nothing gets to delete the job. The job's name."""
    proc = start_step_process(launch, inputs, tmp_path)
    try:
        until(
            "the first step wrote its job's identity", lambda: Path(inputs["job"]).exists() or proc.poll() is not None
        )
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    return load_identity(inputs["job"]).name


def _owner_uids(api_client: Any, launch: Launch, name: str) -> list[str]:
    job = get_job(api_client, launch, name) or {}
    return [o["uid"] for o in job.get("metadata", {}).get("ownerReferences") or []]


def _gone_config_map(core: Any, name: str) -> bool:
    try:
        core.read_namespaced_config_map(name, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_the_step_rides_over_an_api_server_restart_and_relists_what_etcd_compacted(
    cluster: ControlPlane,
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """kube-apiserver stopped while every replica runs (a control-plane upgrade), etcd written and compacted past
    every version the step has seen meanwhile, then started again: the step's requests are refused for a while and
    retried, its watches resume from a compacted version, are answered 410 Gone and re-list; the job's end is reported
    and the step returns, with one job created."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    launcher_pod(api, "launch-step-a", monkeypatch)
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])
    down: list[float] = []

    def compact_past_what_the_step_saw() -> None:
        # Two writes, so that the compaction point is past the revision right after the newest the step can have
        # seen: a watch resumed from version r starts at r + 1.
        cluster.write_etcd("/kftrain-test/a", "1")
        cluster.compact_etcd(cluster.write_etcd("/kftrain-test/b", "2"))

    def restart_then_succeed() -> None:
        name = running_job(api, launch, identity)
        down.append(cluster.restart_apiserver(while_down=compact_past_what_the_step_saw))
        succeed(api, node, launch, name)

    run_step_beside(restart_then_succeed, launch, inputs)
    out = capsys.readouterr().out
    name = load_identity(identity).name
    assert "expired (410 Gone); re-listing" in out, out
    assert f"{name} succeeded" in out, out
    group, version = launch.api_version.split("/")
    jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(group, version, NAMESPACE, launch.plural)
    assert [j["metadata"]["name"] for j in jobs["items"]] == [name]


@pytest.mark.parametrize("level", list(ENFORCING))
@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_in_a_namespace_enforcing_pod_security_the_step_runs_or_says_at_once_why_not(
    level: str,
    launch: Launch,
    cluster: ControlPlane,
    api: Any,
    node: NodeAgent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each kind's pods as the step makes them from typed inputs meet ``baseline`` (no host namespace, path or
    port, no privilege, no added capability): the job runs and succeeds. They do not meet ``restricted`` (it requires
    runAsNonRoot, a seccomp profile, no privilege escalation and every capability dropped), so the API server refuses
    each pod the operators create; the step fails within seconds with the API server's words, not after its pending
    timeout (600 s by default), and deletes the job."""
    namespace = ENFORCING[level]
    use_namespace(cluster, namespace, tmp_path, monkeypatch)
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])
    if level == "baseline":

        def run_then_succeed() -> None:
            name = running_job(api, launch, identity, namespace)
            succeed(api, node, launch, name, namespace)

        run_step_beside(run_then_succeed, launch, inputs)
        return
    said = fails_at_once(lambda: launch.component.python_func(**inputs), api, launch, identity, capsys, namespace)
    assert "violates PodSecurity" in said and f'"{level}:latest"' in said, said
    assert f"namespace {namespace} enforces Pod Security Admission" in said, said


@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_with_the_security_context_input_every_kind_runs_in_a_restricted_namespace_but_a_pytorchjobs_workers(
    launch: Launch,
    cluster: ControlPlane,
    api: Any,
    node: NodeAgent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same typed inputs with ``security_context`` set to what ``restricted`` requires: the API server admits
    every pod the operators create, and the job runs to its end; every container of every pod is checked, the
    operators' own included.

    But a PyTorchJob's Workers: training-operator v1.9.0 adds ``init-pytorch`` to each, with no securityContext
    (pkg/controller.v1/pytorch/initcontainer.go). It inherits runAsNonRoot and the seccomp profile from the pod,
    which the input sets; allowPrivilegeEscalation and the dropped capabilities are a container's alone. So the
    Master is created and runs, every Worker is refused, and the job never gets a status: the step must fail
    within seconds, naming the operator's container and how a cluster fixes it, and delete the job."""
    namespace = ENFORCING["restricted"]
    use_namespace(cluster, namespace, tmp_path, monkeypatch)
    inputs = step_inputs(launch, tmp_path, security_context=RESTRICTED)
    identity = Path(inputs["job"])
    if launch.kind == "PyTorchJob":
        said = fails_at_once(lambda: launch.component.python_func(**inputs), api, launch, identity, capsys, namespace)
        assert 'container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false' in said, said
        assert "runAsNonRoot != true" not in said and "seccompProfile" not in said, said  # inherited from the pod
        assert "container init-pytorch: training-operator adds it" in said, said
        return

    def run_then_succeed() -> None:
        name = running_job(api, launch, identity, namespace)
        for pod in job_pods(api, launch, name, namespace):
            assert pod.spec.security_context.run_as_non_root, pod.metadata.name
            for c in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
                assert c.security_context.allow_privilege_escalation is False, (pod.metadata.name, c.name)
        succeed(api, node, launch, name, namespace)

    run_step_beside(run_then_succeed, launch, inputs)


# What a cluster admin gives training-operator (--pytorch-init-container-template-file) so that a PyTorchJob's Workers
# meet restricted: v1.9.0's own template (pkg/controller.v1/pytorch/initcontainer.go, initContainerTemplate) with the
# two fields a container cannot inherit from its pod.
INIT_PYTORCH_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
  command:
  - sh
  - -c
  - >-
    err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}};
    then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err
"""


def test_a_pytorchjob_runs_in_a_restricted_namespace_once_the_operators_init_container_template_is_secured(
    cluster: ControlPlane,
    api: Any,
    node: NodeAgent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fix the step names when a PyTorchJob's Workers are refused for ``init-pytorch``, done as an admin does
    it: training-operator started with an init container template that sets allowPrivilegeEscalation and drops
    every capability. With the ``security_context`` input (runAsNonRoot and the seccomp profile on the pod, which
    init-pytorch inherits), every pod is admitted under restricted and the job runs to its end."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    namespace = ENFORCING["restricted"]
    use_namespace(cluster, namespace, tmp_path, monkeypatch)
    inputs = step_inputs(launch, tmp_path, security_context=RESTRICTED)
    identity = Path(inputs["job"])

    def run_then_succeed() -> None:
        name = running_job(api, launch, identity, namespace)
        workers = [p for p in job_pods(api, launch, name, namespace) if "-worker-" in p.metadata.name]
        assert workers, "no Worker was admitted"
        for pod in workers:
            (init,) = pod.spec.init_containers
            assert init.name == "init-pytorch" and init.security_context.allow_privilege_escalation is False
        succeed(api, node, launch, name, namespace)

    template = "/tmp/init-pytorch.yaml"  # in the operator's own /tmp
    with cluster.operator_redeployed(
        "training-operator",
        [f"--pytorch-init-container-template-file={template}"],
        {"init-pytorch.yaml": INIT_PYTORCH_TEMPLATE},
    ):
        run_step_beside(run_then_succeed, launch, inputs)


def test_a_suspended_trainjob_waits_and_runs_once_its_queue_sets_suspend_false(
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A TrainJob created suspended (as Kueue's webhook leaves it until its queue admits it): Trainer makes its
    JobSet suspended and no pod exists; the step waits, saying why. ``spec.suspend: false`` (what Kueue writes on
    admission) lets JobSet create the Jobs and their pods; the step follows the job to its end
    (kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go; pkg/apis/trainer/v1alpha1/trainjob_types.go,
    TrainJobSuspended = "Suspended")."""
    launch = next(t for t in TYPED if t.kind == "TrainJob")
    manifest = yaml.safe_load(
        next(m for m in LAUNCHES if m.kind == "TrainJob" and m.source == "manifest").inputs["manifest"]
    )
    manifest["spec"]["suspend"] = True
    launcher_pod(api, "launch-step-a", monkeypatch)
    inputs = {k: v for k, v in step_inputs(launch, tmp_path).items() if k not in launch.inputs}
    inputs["manifest"] = yaml.safe_dump(manifest)
    identity = Path(inputs["job"])
    custom = client.CustomObjectsApi(api)
    group, version = launch.api_version.split("/")

    def admit_then_succeed() -> None:
        until("the step wrote its job's identity", identity.exists)
        name = load_identity(identity).name
        until("the TrainJob suspended", lambda: _condition(get_job(api, launch, name) or {}, "Suspended") == "True")
        assert job_pods(api, launch, name) == []
        custom.patch_namespaced_custom_object(
            group, version, NAMESPACE, launch.plural, name, {"spec": {"suspend": False}}
        )
        until(f"every pod of {name} running", lambda: all_running(api, launch, name))
        succeed(api, node, launch, name)

    run_step_beside(admit_then_succeed, launch, inputs)
    out = capsys.readouterr().out
    name = load_identity(identity).name
    assert "Suspended" in out and f"{name} succeeded" in out, out


def test_a_trainjobs_progress_reaches_the_step_through_trainers_status_server(
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A TrainJob's trainer node posts its progress twice to the endpoint Trainer gave it (its status server, which
    authenticates the node's projected token through the API server's OpenID discovery and applies the report to
    ``status.trainerStatus``); the step, watching the TrainJob, says each and puts the last into its Metrics output,
    as it does with kftrain's local status server (tests/launch/test_trainjob_cluster.py on the fake cluster)."""
    launch = next(t for t in TYPED if t.kind == "TrainJob")
    launcher_pod(api, "launch-step-a", monkeypatch)
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])

    def report_then_succeed() -> None:
        name = running_job(api, launch, identity)
        (pod, *_) = job_pods(api, launch, name)
        credentials = node_credentials(api, api.sanitize_for_serialization(pod))
        for pct, loss in ((40, "0.5"), (100, "0.125")):
            status = {
                "progressPercentage": pct,
                "estimatedRemainingSeconds": 100 - pct,
                "metrics": [{"name": "loss", "value": loss}, {"name": "accuracy", "value": "0.9"}],
                "lastUpdatedTime": "2026-11-28T03:00:00Z",
            }
            answer = report(credentials, status)
            assert answer.code == 200, answer.body
            until(f"{name}'s trainerStatus at {pct}%", lambda pct=pct: _progress(api, launch, name) == pct)
        succeed(api, node, launch, name)

    run_step_beside(report_then_succeed, launch, inputs)
    out = capsys.readouterr().out
    assert "progress: 40% loss 0.5 accuracy 0.9 | eta 1m00s (trainer status)" in out, out
    assert "progress: 100% loss 0.125 accuracy 0.9 | eta 0s (trainer status)" in out, out
    assert inputs["metrics"].metadata == {"loss": 0.125, "accuracy": 0.9, "progress_percentage": 100.0}


def _progress(api: Any, launch: Launch, name: str) -> Any:
    """The progress on the job's ``status.trainerStatus`` (None: none)."""
    status = ((get_job(api, launch, name) or {}).get("status") or {}).get("trainerStatus") or {}
    return status.get("progressPercentage")


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def test_a_pod_the_api_server_finds_invalid_fails_the_step_at_once(
    api: Any,
    node: NodeAgent,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A manifest whose Worker template breaks a pod rule kftrain does not model (``dnsPolicy``: the CRD's schema
    takes any string; ValidatePodSpec does not): the CRD admits the job, the training-operator creates the Master
    and is refused every Worker (`Pod "..." is invalid`), and the job never gets a status. The step fails within
    seconds with the API server's words and deletes the job, rather than waiting out its timeout."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    manifest = yaml.safe_load(
        next(m for m in LAUNCHES if m.kind == "PyTorchJob" and m.source == "manifest").inputs["manifest"]
    )
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["dnsPolicy"] = "Bogus"
    launcher_pod(api, "launch-step-a", monkeypatch)
    inputs = {k: v for k, v in step_inputs(launch, tmp_path).items() if k not in launch.inputs}
    inputs["manifest"] = yaml.safe_dump(manifest)
    identity = Path(inputs["job"])

    def master_runs() -> None:
        until("the step wrote its job's identity", identity.exists)
        name = load_identity(identity).name
        until(f"{name}'s master running", lambda: all_running(api, launch, name))

    said = fails_at_once(lambda: run_step_beside(master_runs, launch, inputs), api, launch, identity, capsys)
    assert "refused the job's pods as invalid" in said and 'spec.dnsPolicy: Unsupported value: "Bogus"' in said, said

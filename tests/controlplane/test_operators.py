"""What the real operators make of the jobs kftrain renders, beside what kftrain's local backend runs for each replica.

On the real control plane (the four operators with their webhooks, a node agent running their pods), each kind's job
built as the launch step builds it (:class:`~kftrain.job.request.JobRequest`) must be admitted; each pod the
operator creates is compared, field by field, with the replica the local backend prepares
(:func:`kftrain.backends.local.replica.prepare_replica`): environment, command, arguments, ports, restart policy, host
name, and the Services its addresses name. Every difference is a local backend bug or in :data:`MUST_DIFFER`, with
why. The fast tier's simulated operator is held to the real pods too. How the backend reports the operators' verdicts:
test_operator_endings.py.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kftrain.backends.kubernetes.pod_state import pod_label
from kftrain.backends.local.config import LocalConfig
from kftrain.backends.local.one_machine import local_host_of
from kftrain.backends.local.replica import expand_k8s_vars, image_env, prepare_replica
from kftrain.backends.local.status_server import StatusServer
from kftrain.job.kinds import KINDS, KindOptions, kind_of
from kftrain.job.kinds.mpijob import hostfile as mpi_hostfile
from kftrain.job.kinds.mpijob.options import MPIJobOptions
from kftrain.job.kinds.pytorchjob.options import PyTorchJobOptions
from kftrain.job.kinds.tfjob.options import TFJobOptions
from kftrain.job.kinds.trainjob.options import TrainJobOptions
from kftrain.job.kinds.trainjob.policies import STATUS_CA_CERT_ENV, STATUS_TOKEN_ENV, STATUS_URL_ENV
from kftrain.job.manifest.load import render_manifest
from kftrain.job.model import RestartPolicy, TrainingJob
from kftrain.job.request import JobRequest
from kftrain.job.topology import LOCAL_HOST, ReplicaId, Topology, all_replicas
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import api_fixture, node_fixture, operated_cluster_fixture  # noqa: F401
from testbed.controlplane.node_agent import NodeAgent, Plans

pytestmark = suite.MARKS

NAMESPACE = "kftrain-operators"
IMAGE = "example.com/train:1"
# A $(VAR) reference in the arguments: the kubelet expands it from the container's env, and so must the local backend.
COMMAND = ["python", "train.py"]
ARGS = ["--epochs", "$(EPOCHS)"]
ENV = {"EPOCHS": "3"}
PODS_WAIT_S = 90.0
Pod = dict[str, Any]


@dataclass(frozen=True)
class Case:
    kind: str
    options: Callable[[], KindOptions]
    name: str


CASES = [
    Case("TFJob", lambda: TFJobOptions(chief=1, ps=1, workers=2), "tf-compare"),
    Case("PyTorchJob", lambda: PyTorchJobOptions(workers=2), "pt-compare"),
    Case("MPIJob", lambda: MPIJobOptions(workers=2), "mpi-compare"),
    Case("TrainJob", lambda: TrainJobOptions(num_nodes=2), "tj-compare"),
]


# What the node does with each pod of a job, by the job's name and the pod's replica label (worker-1); a pod of a job
# without a plan runs until the module ends.
PLANS = Plans()


def build(case: Case) -> TrainingJob:
    """The job as the launch step builds it from its inputs."""
    request = JobRequest(case.kind, image=IMAGE, command=COMMAND, args=ARGS, env=ENV, options=case.options())
    kind = KINDS.get(case.kind)
    job = request.to_job(case.name, runtimes=kind.runtimes_from_env())
    job.metadata.namespace = NAMESPACE
    return job


def submit(api_client: Any, job: TrainingJob) -> dict[str, Any]:
    """Create the rendered manifest as kftrain's Kubernetes backend does (CustomObjectsApi)."""
    manifest = render_manifest(job)
    spec = kind_of(job).spec
    custom = client.CustomObjectsApi(api_client)
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        spec.group, spec.version, NAMESPACE, spec.plural, manifest
    )
    return created


def wait_for_pods(api_client: Any, job: TrainingJob, cluster: ControlPlane, node: NodeAgent) -> dict[ReplicaId, Pod]:
    """Each replica's pod, once every replica has one and it runs."""
    core = client.CoreV1Api(api_client)
    label = kind_of(job).spec.pod_job_label
    wanted = {rid.label: rid for rid in all_replicas(job)}
    deadline = time.monotonic() + PODS_WAIT_S
    while True:
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"{label}={job.name}", _preload_content=False)
        pods = {p["metadata"]["name"]: p for p in yaml.safe_load(listed.data)["items"]}
        found = {wanted[pod_label(p)]: p for p in pods.values() if pod_label(p) in wanted}
        if len(found) == len(wanted) and all(p["status"].get("phase") == "Running" for p in found.values()):
            return found
        if time.monotonic() > deadline:
            operator = {"TFJob": "training-operator", "PyTorchJob": "training-operator", "MPIJob": "mpi-operator"}
            logs = cluster.log_tail(operator.get(job.kind, "trainer"), 15)
            pytest.fail(
                f"{job.kind} {job.name}: pods {sorted(pods)} for replicas {sorted(wanted)}; node errors "
                f"{node.errors[-3:]}; operator log:\n{logs}"
            )
        time.sleep(0.2)


def services(api_client: Any) -> list[dict[str, Any]]:
    listed = client.CoreV1Api(api_client).list_namespaced_service(NAMESPACE, _preload_content=False)
    items: list[dict[str, Any]] = yaml.safe_load(listed.data)["items"]
    return items


# --- the comparison ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    replica: str
    field: str
    cluster: object
    local: object


def main_of(pod: Pod, job: TrainingJob, rid: ReplicaId) -> dict[str, Any]:
    """The pod's container the operator treats as the replica's program (as kftrain's kind picks it)."""
    kind = kind_of(job)
    name = kind.main_container_name(job, rid.type)
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == name), containers[0])


def pod_env(pod: Pod, container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet resolves it: values with $(VAR) references expanded in order, and a
    fieldRef read from the pod (kubernetes@v1.36.3:pkg/kubelet/kubelet_pods.go, podFieldSelectorRuntimeValue; the
    fields the Downward API allows: pkg/apis/core/validation/validation.go, validEnvDownwardAPIFieldPathExpressions)."""
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "valueFrom" in var:
            ref = var["valueFrom"].get("fieldRef", {}).get("fieldPath")
            env[var["name"]] = field_value(pod, ref) if ref else f"<valueFrom {sorted(var['valueFrom'])}>"
        else:
            env[var["name"]] = expand_k8s_vars(var.get("value", ""), env)
    return env


def field_value(pod: Pod, path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
    }
    return str(fields.get(path, f"<fieldRef {path}>"))


def cluster_hosts(pods: Mapping[ReplicaId, Pod], svcs: list[dict[str, Any]]) -> re.Pattern[str]:
    """Every name a pod of the job is reached by: a pod's hostname (with its subdomain, namespace and svc suffixes),
    and each Service's name (likewise)."""
    names = {p["spec"].get("hostname") or p["metadata"]["name"] for p in pods.values()}
    names |= {s["metadata"]["name"] for s in svcs}
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(rf"\b(?:{alternatives})(?:\.[a-z0-9-]+)*(?:\.svc(?:\.cluster\.local)?)?\b")


def local_replica(job: TrainingJob, rid: ReplicaId, pods: Mapping[ReplicaId, Pod], tmp: Path) -> Any:
    """What the local backend prepares for ``rid``, its listening replicas on the ports their pods declare (so that
    only the host names differ)."""
    kind = kind_of(job)
    ports = {}
    for listener in kind.listening_replicas(job):
        container = main_of(pods[listener], job, listener) if listener in pods else {}
        declared = [p["containerPort"] for p in container.get("ports") or []]
        ports[listener] = declared[0] if declared else 0
    topology = Topology(ports=ports, files_root=tmp, host_of=local_host_of(LOCAL_HOST))
    config = LocalConfig(clean_env=True, workdir=tmp)
    if not kind.reports_status(job):
        return prepare_replica(job, rid, topology, config, tmp / "logs")
    # As the local backend runs a TrainJob: its own status server, whose endpoint every trainer node is given.
    server = StatusServer(NAMESPACE, job.name, tmp / "trainer-status", lambda status: None)
    topology.status = server.start()
    try:
        return prepare_replica(job, rid, topology, config, tmp / "logs")
    finally:
        server.stop()


def config_maps(api_client: Any) -> list[dict[str, Any]]:
    listed = client.CoreV1Api(api_client).list_namespaced_config_map(NAMESPACE, _preload_content=False)
    items: list[dict[str, Any]] = yaml.safe_load(listed.data)["items"]
    return items


def compare_files(job: TrainingJob, maps: list[dict[str, Any]], tmp: Path) -> list[Difference]:
    """Each file the operator mounts (kftrain's Kind.operator_files, as the local backend writes it) beside the
    ConfigMap key of the same name in a ConfigMap the job owns."""
    owned = [m for m in maps if any(o.get("name") == job.name for o in m["metadata"].get("ownerReferences") or [])]
    topology = Topology(files_root=tmp, host_of=local_host_of(LOCAL_HOST))
    found = []
    for path, mounted in sorted(kind_of(job).operator_files(job, topology).items()):
        key = path.rsplit("/", 1)[-1]
        cluster = next((m["data"][key] for m in owned if key in (m.get("data") or {})), None)
        if cluster != mounted.content:
            found.append(Difference("files", f"file {path}", cluster, mounted.content))
    return found


def compare(job: TrainingJob, pods: Mapping[ReplicaId, Pod], svcs: list[dict[str, Any]], tmp: Path) -> list[Difference]:
    kind = kind_of(job)
    hosts = cluster_hosts(pods, svcs)
    found: list[Difference] = []
    processes = set(kind.process_replicas(job))
    for rid, pod in sorted(pods.items()):
        container = main_of(pod, job, rid)
        where = rid.label
        raw_env = pod_env(pod, container)
        if rid not in processes:
            # A replica that runs nothing of its own locally (an MPIJob Worker: mpirun starts its ranks here).
            what = [*(container.get("command") or []), *(container.get("args") or [])] or "the image's entrypoint"
            found.append(Difference(where, "process", what, "none"))
            continue
        local = local_replica(job, rid, pods, tmp)

        # The environment: what the pod's spec gives the container, and what the local backend adds to an image's.
        cluster_env = {k: hosts.sub(LOCAL_HOST, v) for k, v in pod_env(pod, container).items()}
        base = image_env(kind.pod_hostname(job, rid))
        local_env = {k: v for k, v in local.env.items() if k not in base and k != "TMPDIR"}
        for name in sorted(set(cluster_env) | set(local_env)):
            if cluster_env.get(name) != local_env.get(name):
                found.append(Difference(where, f"env.{name}", cluster_env.get(name), local_env.get(name)))
        # Where a node posts its progress: another server, but this job's path on it.
        if STATUS_URL_ENV in raw_env or STATUS_URL_ENV in local.env:
            paths = [urllib.parse.urlsplit(env.get(STATUS_URL_ENV, "")).path for env in (raw_env, local.env)]
            if paths[0] != paths[1]:
                found.append(Difference(where, "status endpoint path", *paths))

        # What runs: the kubelet expands $(VAR) in command and args from the container's env.
        argv = [
            expand_k8s_vars(a, raw_env) for a in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        local_argv = ["python" if a == sys.executable else a for a in local.argv]
        mounted = {str(kind_path): path for path, kind_path in _mounted(job, tmp).items()}
        local_argv = [mounted.get(a, a) for a in local_argv]
        if argv != local_argv:
            found.append(Difference(where, "command+args", argv, local_argv))

        # Ports: the operator declares its port on every replica's container; locally only a replica others connect
        # to gets one.
        declared = sorted(p["containerPort"] for p in container.get("ports") or [])
        local_ports = [local_port] if (local_port := _local_port(job, rid, pods)) else []
        if declared != local_ports:
            found.append(Difference(where, "ports", declared, local_ports))

        # The restart policy the kubelet applies to the pod, and the one the local supervisor applies to the process
        # (ExitCode is the operator's: it sets the pod's Never and decides itself).
        pod_policy = pod["spec"].get("restartPolicy")
        local_policy = local.policy.value if local.policy != RestartPolicy.EXIT_CODE else "Never"
        if pod_policy != local_policy:
            found.append(Difference(where, "restartPolicy", pod_policy, local_policy))

        # The host name the program sees (the kubelet sets HOSTNAME to the pod's hostname, else its name).
        hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
        if hostname != local.env.get("HOSTNAME"):
            found.append(Difference(where, "hostname", hostname, local.env.get("HOSTNAME")))

        # Containers the operator runs before the replica's own (the job's template has none): locally none.
        given = {c.get("name") for c in job.replica_specs[rid.type].template.spec.extra.get("initContainers") or []}
        added = [c["name"] for c in pod["spec"].get("initContainers") or [] if c.get("name") not in given]
        if added:
            found.append(Difference(where, "initContainers", added, []))

        # Every name the pod's env reaches another replica by is served: a Service of that name, or a pod's hostname
        # under a headless Service named by its subdomain.
        for name in sorted(set(_names_in(raw_env.values(), hosts))):
            if not _resolves(name, pods, svcs):
                found.append(Difference(where, f"dns {name}", "no Service serves it", "localhost"))
    return found


def _mounted(job: TrainingJob, tmp: Path) -> dict[str, Path]:
    topology = Topology(files_root=tmp)
    return {path: topology.file(path) for path in kind_of(job).operator_files(job, topology)}


def _local_port(job: TrainingJob, rid: ReplicaId, pods: Mapping[ReplicaId, Pod]) -> int:
    if rid not in kind_of(job).listening_replicas(job):
        return 0
    declared = [p["containerPort"] for p in main_of(pods[rid], job, rid).get("ports") or []]
    return declared[0] if declared else -1


def _names_in(values: Any, hosts: re.Pattern[str]) -> Iterator[str]:
    for value in values:
        yield from (m.group(0) for m in hosts.finditer(value))


def _resolves(name: str, pods: Mapping[ReplicaId, Pod], svcs: list[dict[str, Any]]) -> bool:
    first, *rest = name.split(".")
    services = {s["metadata"]["name"]: s for s in svcs}
    if first in services and (not rest or rest[0] in (NAMESPACE, "svc")):
        return True
    for pod in pods.values():
        spec = pod["spec"]
        if spec.get("hostname") == first and rest and rest[0] == spec.get("subdomain") in services:
            return services[rest[0]]["spec"].get("clusterIP") == "None"
    return False


# Why each field must differ between a pod and the local replica, by kind: (kind, replica label or "*", field) ->
# reason. Every other difference is a bug of the local backend.
ONE_HOST = "one machine: every replica is localhost, and no DNS name of a pod or Service resolves here"
NO_CALLERS = (
    "the operator declares its port on every replica's container; locally a port is taken only for a replica others "
    "connect to (Kind.listening_replicas), and no one connects to this one"
)
MUST_DIFFER: dict[tuple[str, str, str], str] = {
    ("*", "*", "env.KFTRAIN_BACKEND"): "the local backend's own marker, that a program runs here and not in its "
    "image (kftrain.backends.local.one_machine.adapt_env)",
    ("PyTorchJob", "*", "ports"): NO_CALLERS,
    ("TrainJob", "*", "ports"): NO_CALLERS,
    ("MPIJob", "worker-0", "process"): "a Worker runs sshd for the launcher's mpirun to start ranks through; locally "
    "mpirun starts every rank on this machine itself, so no Worker process runs (Kind.process_replicas)",
    ("MPIJob", "worker-1", "process"): "as worker-0",
    ("MPIJob", "launcher-0", "env.OMPI_ALLOW_RUN_AS_ROOT"): "mpirun refuses root without it; a pod's image sets it "
    "(mpi-operator's base images), locally the backend does when it runs as root (one_machine.local_mpirun_env)",
    ("MPIJob", "launcher-0", "env.OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"): "as OMPI_ALLOW_RUN_AS_ROOT",
    ("MPIJob", "launcher-0", "env.OMPI_MCA_orte_default_hostfile"): "the operator mounts the hostfile at "
    "/etc/mpi/hostfile; locally it is written in the job's work folder and the variable names it there",
    ("MPIJob", "files", "file /etc/mpi/hostfile"): "the operator lists each Worker pod by its DNS name with its "
    "slots; locally every rank runs here, so one line, localhost with all the slots (kinds.mpijob.hostfile, "
    "merge_hosts); the test checks the operator's file is kftrain's model of it",
    ("TrainJob", "*", f"env.{STATUS_URL_ENV}"): "where a node posts its progress: Trainer's status server behind "
    "its Service on a cluster, kftrain's own on 127.0.0.1 locally (kftrain.backends.local.status_server); the path, "
    "which names the job, is compared apart",
    ("TrainJob", "*", f"env.{STATUS_CA_CERT_ENV}"): "a file of the projected volume Trainer mounts at "
    "/var/run/secrets/kubeflow/trainer on a cluster; locally the local status server's CA, in the job's folder",
    ("TrainJob", "*", f"env.{STATUS_TOKEN_ENV}"): "as the CA: a projected ServiceAccount token on a cluster, the local "
    "server's own token locally",
    ("PyTorchJob", "*", "initContainers"): "training-operator adds init-pytorch to every Worker of a job with a "
    "Master, which waits until the Master's Service name resolves (nslookup; pkg/controller.v1/pytorch/"
    "initcontainer.go); locally the Master's host is 127.0.0.1 from the start, and torch's rendezvous waits for it "
    "to listen. Its lack of a securityContext is why a PyTorchJob's Workers fail Pod Security restricted "
    "(tests/controlplane/test_launch_life.py)",
}


def explain(kind: str, diff: Difference) -> str | None:
    for key in ((kind, diff.replica, diff.field), (kind, "*", diff.field), ("*", "*", diff.field)):
        if key in MUST_DIFFER:
            return MUST_DIFFER[key]
    return None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind)
def test_operator_pods_match_the_local_replicas(
    case: Case, cluster: ControlPlane, node: NodeAgent, api: Any, tmp_path: Path
) -> None:
    job = build(case)
    submit(api, job)
    pods = wait_for_pods(api, job, cluster, node)
    # The count the launch step reads refusals below (kftrain/backends/kubernetes/refused.py), from the job as
    # served: the pods the operator made (a TrainJob's runtime decides its own: not counted from the job).
    spec = kind_of(job).spec
    served = client.CustomObjectsApi(api).get_namespaced_custom_object(
        spec.group, spec.version, NAMESPACE, spec.plural, job.name
    )
    assert kind_of(job).expected_pods(served) == (None if job.kind == "TrainJob" else len(pods))
    differences = compare(job, pods, services(api), tmp_path) + compare_files(job, config_maps(api), tmp_path)
    if job.kind == "MPIJob":
        # The hostfile the operator writes is the one kftrain models (and the launcher's env names it).
        (cluster_hostfile,) = [d.cluster for d in differences if d.field == "file /etc/mpi/hostfile"]
        assert cluster_hostfile == mpi_hostfile(job)
    unexplained = [d for d in differences if explain(case.kind, d) is None]
    assert not unexplained, "\n".join(
        f"{d.replica} {d.field}: cluster {d.cluster!r} local {d.local!r}" for d in unexplained
    )


# --- a job's end, as kftrain's Kubernetes backend sees it -----------------------------------------------------------


# --- the fast tier's simulated operator, beside the real ones --------------------------------------------------------


def fake_operator_pods(job: TrainingJob) -> tuple[str, dict[str, Pod]]:
    """The job's uid on testbed/fake_k8s, and the pods its simulated operator makes for the same rendered job, by
    replica label."""
    from testbed.fake_k8s import FakeKube, JobSim
    from testbed.k8s_harness import api_client as fake_client
    from testbed.reference import CRD_DIR

    spec = kind_of(job).spec
    kube = FakeKube(CRD_DIR).start()
    try:
        kube.add_namespace(NAMESPACE)
        with fake_client(kube) as api_client:
            created = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                spec.group, spec.version, NAMESPACE, spec.plural, render_manifest(job)
            )
        JobSim(kube, spec.plural, created).create_pods()
        with kube.cond:
            return created["metadata"]["uid"], {pod_label(p): p for p in kube.pods.values()}
    finally:
        kube.stop()


def owner_of(pod: Pod, job_uid: str) -> list[dict[str, Any]]:
    """The pod's ownerReferences, a uid shown as whether it is the job's."""
    refs = pod["metadata"].get("ownerReferences") or []
    return [{**ref, "uid": ref.get("uid") == job_uid} for ref in refs]


# Labels of the real operators' pods that the simulated operator leaves out: none is read by the launch step (it
# selects a job's pods by its job-name label and names a replica from its replica-type/index, job-role or JobSet's
# completion index: kftrain/backends/kubernetes/pod_state.py).
NOT_SIMULATED_LABELS = {
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
    "jobset.sigs.k8s.io/global-replicas",
    "jobset.sigs.k8s.io/job-global-index",
    "jobset.sigs.k8s.io/job-index",
    "jobset.sigs.k8s.io/job-key",
    "jobset.sigs.k8s.io/replicatedjob-replicas",
    "jobset.sigs.k8s.io/restart-attempt",
    "trainer.kubeflow.org/trainjob-ancestor-step",
    "jobset.sigs.k8s.io/group-name",
    "jobset.sigs.k8s.io/group-replicas",
    "jobset.sigs.k8s.io/job-group-index",
    "jobset.sigs.k8s.io/jobset-uid",
    "jobset.sigs.k8s.io/priority",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind)
def test_the_simulated_operator_labels_and_owns_pods_as_the_real_one(
    case: Case, cluster: ControlPlane, node: NodeAgent, api: Any
) -> None:
    """The fast tier's operator (testbed/fake_k8s/operator.py) gives each replica's pod the labels the real operator
    gives it (the values too), save those in :data:`NOT_SIMULATED_LABELS`, and no label of its own; the same
    ownerReferences (the job, or a TrainJob's and an MPIJob launcher's child Job); the same replicas; the same init
    containers the operator adds (a PyTorchJob Worker's ``init-pytorch``: image, command, resources)."""
    job = build(Case(case.kind, case.options, case.name + "-sim"))
    real_job = submit(api, job)
    real = {pod_label(p): p for p in wait_for_pods(api, job, cluster, node).values()}
    fake_uid, fake = fake_operator_pods(job)
    assert sorted(fake) == sorted(real)
    differences = []
    for label, pod in sorted(real.items()):
        real_labels = {k: v for k, v in pod["metadata"]["labels"].items() if k not in NOT_SIMULATED_LABELS}
        fake_labels = fake[label]["metadata"]["labels"]
        if real_labels != fake_labels:
            differences.append(f"{label} labels: real {real_labels}, simulated {fake_labels}")
        real_owner, fake_owner = owner_of(pod, real_job["metadata"]["uid"]), owner_of(fake[label], fake_uid)
        if real_owner != fake_owner:
            differences.append(f"{label} ownerReferences: real {real_owner}, simulated {fake_owner}")
        real_init, fake_init = _init_containers(pod), _init_containers(fake[label])
        if real_init != fake_init:
            differences.append(f"{label} initContainers: real {real_init}, simulated {fake_init}")
    assert not differences, "\n".join(differences)


def _init_containers(pod: Pod) -> list[dict[str, Any]]:
    """What an operator writes of each init container: the API server's defaults (terminationMessagePath, ...) and
    the kubelet's fields left out."""
    kept = ("name", "image", "command", "args", "resources", "imagePullPolicy")
    return [{k: c[k] for k in kept if k in c} for c in pod["spec"].get("initContainers") or []]

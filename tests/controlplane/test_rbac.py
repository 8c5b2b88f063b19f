"""deploy/rbac under the real authorizer: the launch step's service account, bound as docs/cluster.md says, can make
every request kftrain's Kubernetes backend makes in a job's life, and nothing the backend never asks for.

The API server (testbed/controlplane) authorizes by RBAC alone (``--authorization-mode=RBAC``); the admin is in
``system:masters``, which the API server allows everything before RBAC is asked (testbed/controlplane/cluster.py,
ADMIN_GROUP). Each test makes a namespace of
its own, a ServiceAccount in it, applies deploy/rbac's Role and the RoleBinding of the setting under test
(single-user KFP: ``pipeline-runner`` in ``kubeflow``; multi-user Kubeflow: ``default-editor`` in a profile
namespace), binds clusterrole-runtime-reader.yaml's ClusterRole to it, and gets the account's token from the
TokenRequest API. A client holding only that token and the cluster's CA (what the client's in-cluster
configuration builds in a pod) then drives :class:`KubernetesBackend` itself: submit, reattach (a restarted
launcher), wait, the ``kftrain jobs`` views, delete. No operator runs, so the admin plays its part: a replica pod
whose container failed, an event about it, and a Failed condition on the job.

Every request the client makes is recorded with the verb, API group and resource the API server authorizes it as
(:func:`attributes`, a port of the API server's own request parsing), so the tests can say which grant each call
used: none may be refused, the Role's grants must be exactly those used, and removing any one grant must get a
403 on the call that used it.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.backends.kubernetes.api import JobRef, cut
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.errors import KftrainError
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain.job.manifest.load import load_manifest, load_manifest_file
from kftrain.job.model import TrainingJob
from kftrain.job.naming import stamp_run_identity
from kftrain.retry import RetryPolicy
from kftrain.storage import kfp_store
from testbed import REPO_ROOT, reference
from testbed.controlplane.cluster import ControlPlane, for_tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    # One control plane per worker: keep the module's tests on one.
    pytest.mark.xdist_group("controlplane"),
]

RBAC_DIR = REPO_ROOT / "deploy" / "rbac"
EXAMPLES = REPO_ROOT / "examples" / "manifests"
# A grant: (API group, resource or resource/subresource, verb), as RBAC rules name them.
Grant = tuple[str, str, str]
# How long a test waits for what it applied to reach the authorizer, and for a job's wait to end.
SETTLE_S = 30.0
WAIT_S = 30.0


# --- the files under test ---------------------------------------------------------------------------


def rbac_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((RBAC_DIR / name).read_text()) if d]


def the_role() -> dict[str, Any]:
    (role,) = rbac_docs("role.yaml")
    return role


def the_binding(setting: str) -> dict[str, Any]:
    (binding,) = rbac_docs(f"rolebinding-{setting}.yaml")
    return binding


def runtime_reader() -> tuple[dict[str, Any], dict[str, Any]]:
    """clusterrole-runtime-reader.yaml: its ClusterRole and its ClusterRoleBinding."""
    docs = {d["kind"]: d for d in rbac_docs("clusterrole-runtime-reader.yaml")}
    return docs["ClusterRole"], docs["ClusterRoleBinding"]


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


def without(role: dict[str, Any], removed: Grant) -> dict[str, Any]:
    """``role`` less one verb on one resource (its rules split per resource, every other grant kept)."""
    out = copy.deepcopy(role)
    out["rules"] = [
        {"apiGroups": [group], "resources": [resource], "verbs": verbs}
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if (verbs := [v for v in rule["verbs"] if (group, resource, v) != removed])
    ]
    return out


# --- what the API server authorizes a request as ----------------------------------------------------

# The namespace's own subresources: /api/v1/namespaces/{name}/status is the namespace's, not a resource in it.
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


@dataclass(frozen=True)
class Call:
    """One request as the authorizer sees it; ``resource`` is empty for a non-resource URL (``path`` then)."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    path: str
    status: int

    @property
    def grant(self) -> Grant:
        return (self.group, self.resource, self.verb)


def attributes(method: str, url: str, query: list[tuple[str, Any]] | None) -> tuple[str, str, str, str, str]:
    """(verb, group, resource, namespace, name) the API server authorizes ``method`` on ``url`` as: the rules of
    k8s.io/apiserver@v0.36.3:pkg/endpoints/request/requestinfo.go (NewRequestInfo): the verb from the method, a
    GET without a name is a list, or a watch when ``watch`` is set; a DELETE without a name a deletecollection. A
    non-resource URL (discovery) gives an empty resource."""
    path = urllib.parse.urlsplit(url).path
    parts = [p for p in path.split("/") if p]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[
        method.upper()
    ]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return verb, "", "", "", ""
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if not name and verb == "get":
        watching = any(k == "watch" and str(v).lower() not in ("false", "0") for k, v in query or [])
        verb = "watch" if watching else "list"
    if not name and verb == "delete":
        verb = "deletecollection"
    return verb, group, resource, namespace, name


class RecordingClient(client.ApiClient):
    """An ApiClient that records every request it makes, with the status it got (0: no answer), from whichever
    thread makes it (the backend's watches and log streams have threads of their own)."""

    def __init__(self, configuration: client.Configuration) -> None:
        super().__init__(configuration)
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, url: str, query_params: list[tuple[str, Any]] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            response = super().request(method, url, query_params, *args, **kwargs)
        except ApiException as exc:
            self._record(method, url, query_params, exc.status or 0)
            raise
        except Exception:
            self._record(method, url, query_params, 0)
            raise
        self._record(method, url, query_params, response.status)
        return response

    def _record(self, method: str, url: str, query: list[tuple[str, Any]] | None, status: int) -> None:
        verb, group, resource, namespace, name = attributes(method, url, query)
        call = Call(verb, group, resource, namespace, name, urllib.parse.urlsplit(url).path, status)
        with self._lock:
            self.calls.append(call)

    def recorded(self) -> list[Call]:
        with self._lock:
            return list(self.calls)


# --- the cluster and the account under test ---------------------------------------------------------


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    # A control plane of this module's own: the other module's tests create cluster-wide objects of the same names.
    yield from for_tests()


@pytest.fixture(scope="session")
def admin(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    """The admin's client, with what a cluster administrator applies once per cluster: the ClusterRole of
    clusterrole-runtime-reader.yaml and its binding as the file has it, and Trainer's torch-distributed
    ClusterTrainingRuntime (what examples/manifests/trainjob.yaml names)."""
    with cluster.api_client() as api_client:
        cluster_role, cluster_binding = runtime_reader()
        rbac = client.RbacAuthorizationV1Api(api_client)
        rbac.create_cluster_role(cluster_role)
        rbac.create_cluster_role_binding(cluster_binding)
        torch = yaml.safe_load((reference.required(reference.RUNTIMES_DIR) / "torch_distributed.yaml").read_text())
        client.CustomObjectsApi(api_client).create_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", torch
        )
        yield api_client


@dataclass
class Account:
    """The service account a test drives the backend as, in its own namespace."""

    namespace: str
    name: str
    token: str


def new_namespace(admin: client.ApiClient, name: str | None = None) -> str:
    namespace = name or f"team-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
    return namespace


def bind(
    cluster: ControlPlane,
    admin: client.ApiClient,
    *,
    setting: str,
    namespace: str,
    role: dict[str, Any] | None = None,
    runtime_reader_bound: bool = True,
) -> Account:
    """In ``namespace``: the account ``setting``'s binding names, ``role`` (default: role.yaml) and that binding,
    as ``kubectl -n <namespace> apply -f`` applies them (the binding's subject names no namespace: the authorizer
    takes the binding's, kubernetes@v1.36.3:pkg/registry/rbac/validation/rule.go, appliesToUser); with
    ``runtime_reader_bound``, the runtime reader's ClusterRole bound to it too (outside ``kubeflow``, a binding of
    its own: the file's binding names kubeflow's pipeline-runner, and the file says to add a subject per
    namespace). Returns once the authorizer grants what was applied."""
    binding = the_binding(setting)
    (subject,) = binding["subjects"]
    core = client.CoreV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": subject["name"]}})
    role = role or the_role()
    rbac.create_namespaced_role(namespace, role)
    rbac.create_namespaced_role_binding(namespace, binding)
    expected = grants(role["rules"])
    cluster_role, cluster_binding = runtime_reader()
    if runtime_reader_bound:
        expected |= grants(cluster_role["rules"])
        file_subjects = {(s["namespace"], s["name"]) for s in cluster_binding["subjects"]}
        if (namespace, subject["name"]) not in file_subjects:
            own = copy.deepcopy(cluster_binding)
            own["metadata"]["name"] = f"{cluster_binding['metadata']['name']}-{namespace}"
            own["subjects"] = [{"kind": "ServiceAccount", "name": subject["name"], "namespace": namespace}]
            rbac.create_cluster_role_binding(own)
    # TokenRequest: a bound token for the account; no audience asked, so the API server's own
    # (kubernetes@v1.36.3:pkg/registry/core/serviceaccount/storage/token.go), which it authenticates.
    token = core.create_namespaced_service_account_token(
        subject["name"], namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    account = Account(namespace, subject["name"], token)
    settle(cluster, account, expected)
    return account


def settle(cluster: ControlPlane, account: Account, expected: set[Grant]) -> None:
    """Wait until the authorizer grants ``account`` every one of ``expected`` in its namespace.

    The RBAC authorizer reads Roles and bindings from informers (kubernetes@v1.36.3:
    pkg/kubeapiserver/authorizer/reload.go, newForConfig), so what was just created reaches it a moment later; a
    SelfSubjectRulesReview is answered by the same authorizer's rules (pkg/registry/authorization/
    selfsubjectrulesreview/rest.go, RulesFor), so once it lists them, requests are judged by them. The token is
    good at once: the token authenticator reads a ServiceAccount its informer has not seen yet from storage
    (pkg/controller/serviceaccount/tokengetter.go, GetServiceAccount)."""
    deadline = time.monotonic() + SETTLE_S
    with account_client(cluster, account) as api_client:
        while True:
            review = client.AuthorizationV1Api(api_client).create_self_subject_rules_review(
                {"spec": {"namespace": account.namespace}}
            )
            seen = {
                (group, resource, verb)
                for rule in review.status.resource_rules or []
                for group in rule.api_groups or []
                for resource in rule.resources or []
                for verb in rule.verbs or []
            }
            if expected <= seen:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not granted in {SETTLE_S:g}s: {sorted(expected - seen)}")
            time.sleep(0.05)


def account_client(cluster: ControlPlane, account: Account) -> RecordingClient:
    """A client with only the account's token and the cluster's CA: what ``load_incluster_config`` configures from
    a pod's mounted token and CA (the kubernetes Python client 30.1.0, kubernetes/config/incluster_config.py:
    ``bearer <token>``)."""
    cfg = client.Configuration()
    cfg.host = cluster.server
    cfg.ssl_ca_cert = str(cluster.ca_file)
    cfg.api_key = {"authorization": f"bearer {account.token}"}
    return RecordingClient(cfg)


# --- the jobs: one of each kind, and a TrainJob whose file carries its TrainingRuntime ------------------


def example(kind_file: str) -> Callable[[], TrainingJob]:
    return lambda: load_manifest_file(EXAMPLES / kind_file)


def trainjob_with_runtime() -> TrainingJob:
    """A TrainJob on a namespaced TrainingRuntime its own file carries: the backend reads the runtime, creates it
    when the namespace has none of that name, and reads it again on a second submit."""
    runtime = builtin_manifest("torch-distributed")
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "team-torch", "labels": {"trainer.kubeflow.org/framework": "torch"}}
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bundled"},
        "spec": {
            "runtimeRef": {"kind": "TrainingRuntime", "name": "team-torch"},
            "trainer": {"numNodes": 2, "image": "example.com/train:1", "command": ["python", "train.py"]},
        },
    }
    return load_manifest(yaml.safe_dump_all([runtime, job], sort_keys=False))


SCENARIOS: dict[str, Callable[[], TrainingJob]] = {
    "tfjob": example("tfjob.yaml"),
    "pytorchjob": example("pytorchjob.yaml"),
    "mpijob": example("mpijob.yaml"),
    "trainjob": example("trainjob.yaml"),
    "trainjob-runtime": trainjob_with_runtime,
}


def scenarios_for(grant: Grant) -> list[str]:
    """The jobs whose life makes the request ``grant`` allows: a job resource's own kind, a TrainingRuntime's
    TrainJob; pods, logs and events are read for any kind (one suffices)."""
    _, resource, _ = grant
    by_resource = {
        "tfjobs": "tfjob",
        "pytorchjobs": "pytorchjob",
        "mpijobs": "mpijob",
        "trainjobs": "trainjob",
        "trainingruntimes": "trainjob-runtime",
        "clustertrainingruntimes": "trainjob",
    }
    return [by_resource.get(resource, "pytorchjob")]


# --- a job's life, as the backend lives it ----------------------------------------------------------


def backend(api_client: client.ApiClient, namespace: str, owner: str) -> KubernetesBackend:
    """The backend as a launch step makes it, its launcher pod ``owner`` (a restarted launcher is another pod)."""
    config = KubernetesConfig(
        namespace=namespace,
        owner_pod_name=owner,
        owner_pod_uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, owner)),
        log_drain_s=0.5,
        # A refused request is never retried (is_transient); anything else flaky should fail fast here.
        retry=RetryPolicy(attempts=2, initial_s=0.1),
    )
    return KubernetesBackend(config, api_client=api_client)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def operator_plays(admin: client.ApiClient, ref: JobRef, account: Account) -> None:
    """What the operator and the kubelet would do, done by the admin: a replica pod of the job whose main container
    exited 1, a Warning event about it, and the job's Failed condition."""
    core = client.CoreV1Api(admin)
    container = ref.main_container or "launcher"
    pod = f"{ref.name}-worker-0"
    core.create_namespaced_pod(
        ref.namespace,
        {
            "metadata": {
                "name": pod,
                "labels": {
                    ref.pod_label: ref.name,
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "0",
                },
            },
            "spec": {
                # No controller runs to make the namespace's default account (kubernetes@v1.36.3:
                # pkg/controller/serviceaccount/serviceaccounts_controller.go), and admission refuses a pod whose
                # account is missing (plugin/pkg/admission/serviceaccount/admission.go): it runs as the one under test.
                "serviceAccountName": account.name,
                "automountServiceAccountToken": False,
                "restartPolicy": "Never",
                "containers": [{"name": container, "image": "example.com/train:1"}],
            },
        },
    )
    terminated = {"exitCode": 1, "reason": "Error", "startedAt": now(), "finishedAt": now()}
    core.patch_namespaced_pod_status(
        pod,
        ref.namespace,
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": container,
                        "image": "example.com/train:1",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ],
            }
        },
    )
    core.create_namespaced_event(
        ref.namespace,
        {
            "metadata": {"name": f"{pod}.failed"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": ref.namespace},
            "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "type": "Warning",
            "count": 1,
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "source": {"component": "kubelet"},
        },
    )
    condition = {
        "type": "Failed",
        "status": "True",
        "reason": "Failed",
        "message": f"{ref.name} failed",
        "lastTransitionTime": now(),
    }
    status: dict[str, Any] = {"conditions": [condition]}
    if ref.group == "kubeflow.org":
        status["replicaStatuses"] = {}
    client.CustomObjectsApi(admin).patch_namespaced_custom_object_status(
        ref.group, ref.version, ref.namespace, ref.plural, ref.name, {"status": status}
    )


def short_watch(request: Callable[..., Any]) -> None:
    """Open one watch of ``request``'s collection (the backend's own request) and close it at once: whether it is
    allowed is decided before the stream starts."""
    response = request(watch=True, timeout_seconds=1, allow_watch_bookmarks=True, _preload_content=False)
    cut(response)
    response.release_conn()


def live(admin: client.ApiClient, api_client: RecordingClient, account: Account, scenario: str) -> None:
    """One job's life through the backend, as the account: every request it makes is recorded by ``api_client``.

    submit (discovery for MPIJob's version, a TrainJob's runtime read, or created from its file, the create), a
    restarted launcher's submit (409: get, and patch to add itself to the owners), the operator's part
    (:func:`operator_plays`), the wait of the first launcher (watches resumed from the create) and of the second
    (lists, then watches), each ending on the Failed condition and reading the pods, their logs and the events to
    explain it; a short watch of the job and of its pods by the backend's own requests (the waits may end before
    theirs is opened); ``kftrain jobs``' list, describe, logs and delete; the first launcher's cancel."""
    # The step's store lookup reads its own pod (the KFP launcher's version, kfp_store._Cluster.version) before
    # the job: authorized as get on pods whether or not the pod exists (a 404 comes after the authorizer).
    os.environ["KFP_POD_NAME"] = "launch-step"
    try:
        kfp_store._Cluster(api_client, account.namespace).version()
    finally:
        del os.environ["KFP_POD_NAME"]
    job = SCENARIOS[scenario]()
    stamp_run_identity(job, run_id=f"run-{uuid.uuid4().hex[:8]}", task_id=scenario)
    first = backend(api_client, account.namespace, "launch-1")
    handle = first.submit(job)
    second = backend(api_client, account.namespace, "launch-2")
    again = second.submit(job)
    assert again.uid == handle.uid
    ref = JobRef.of(handle)
    operator_plays(admin, ref, account)
    for launcher, its in ((first, handle), (second, again)):
        result = launcher.wait(its, timeout=WAIT_S)
        # The failure explained from what was read: the pod listed, its log read, the events listed.
        assert (result.reason, result.failed_replica) == ("Failed", "worker-0"), result
        assert "BackOff Pod/" in result.message, result.message
    short_watch(second.api.job_collection(ref))
    short_watch(second.api.pod_collection(ref))
    assert ref.name in {s.name for s in second.list_jobs()}
    assert any("event BackOff" in line for line in second.get_job(ref.name).details)
    list(second.job_logs(ref.name))
    second.delete_job(ref.name)
    first.cancel(handle)


def refused(calls: list[Call]) -> set[Grant]:
    return {c.grant for c in calls if c.status == 403}


def namespaced_grants(calls: list[Call]) -> set[Grant]:
    return {c.grant for c in calls if c.resource and c.namespace}


def cluster_grants(calls: list[Call]) -> set[Grant]:
    return {c.grant for c in calls if c.resource and not c.namespace}


# --- the tests --------------------------------------------------------------------------------------

SETTINGS = {
    # Single-user KFP: steps run as pipeline-runner in kubeflow, where the file's ClusterRoleBinding names it.
    "pipeline-runner": "kubeflow",
    # Multi-user Kubeflow: steps run as default-editor in each profile's namespace.
    "default-editor": None,
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_backend_is_never_refused_and_uses_every_grant(
    setting: str, cluster: ControlPlane, admin: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job kind's whole life through the backend, as the bound account: no request is refused, and the
    (group, resource, verb) the requests were authorized as are exactly the Role's grants in the namespace and the
    runtime reader's ClusterRole's outside it."""
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    namespace = new_namespace(admin, SETTINGS[setting])
    account = bind(cluster, admin, setting=setting, namespace=namespace)
    with account_client(cluster, account) as api_client:
        for scenario in SCENARIOS:
            live(admin, api_client, account, scenario)
        calls = api_client.recorded()
    assert refused(calls) == set(), [c for c in calls if c.status == 403]
    assert {c.path for c in calls if not c.resource and c.status != 200} == set()  # discovery
    assert all(c.namespace in ("", namespace) for c in calls)
    cluster_role, _ = runtime_reader()
    assert namespaced_grants(calls) == grants(the_role()["rules"]), (
        f"granted but never used: {sorted(grants(the_role()['rules']) - namespaced_grants(calls))}; "
        f"used but not granted: {sorted(namespaced_grants(calls) - grants(the_role()['rules']))}"
    )
    assert cluster_grants(calls) == grants(cluster_role["rules"])


@pytest.mark.parametrize(
    "removed", sorted(grants(the_role()["rules"])), ids=lambda g: f"{g[1]}.{g[0] or 'core'}-{g[2]}"
)
def test_every_grant_of_the_role_is_needed(
    removed: Grant, cluster: ControlPlane, admin: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Role less one verb on one resource: the backend's job life now gets a 403, on that grant alone."""
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    namespace = new_namespace(admin)
    account = bind(cluster, admin, setting="default-editor", namespace=namespace, role=without(the_role(), removed))
    assert_refused_on(cluster, admin, account, removed)


def test_the_runtime_reader_is_needed(
    cluster: ControlPlane, admin: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the runtime reader's ClusterRole bound, a TrainJob on a ClusterTrainingRuntime is refused the read
    of its runtime, before anything is created."""
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    namespace = new_namespace(admin)
    account = bind(cluster, admin, setting="default-editor", namespace=namespace, runtime_reader_bound=False)
    (removed,) = grants(runtime_reader()[0]["rules"])
    assert_refused_on(cluster, admin, account, removed)


def assert_refused_on(cluster: ControlPlane, admin: client.ApiClient, account: Account, removed: Grant) -> None:
    with account_client(cluster, account) as api_client:
        for scenario in scenarios_for(removed):
            # The first refusal ends the life: the backend raises it, or says so, or (reading what explains a
            # failure: diagnose_failure, LogFollower) leaves out what it was refused, which fails the life's own
            # checks. The recorder saw the refusal either way, and judges below.
            with contextlib.suppress(ApiException, KftrainError, AssertionError):
                live(admin, api_client, account, scenario)
        calls = api_client.recorded()
    assert refused(calls) == {removed}, [(c.verb, c.group, c.resource, c.status) for c in calls]


# What the account must not do, whatever the backend needs: each request, as the account, and the grant it would
# need. A SubjectAccessReview would ask the same authorizer; making the request shows the refusal itself.
FORBIDDEN: dict[str, tuple[Grant, Callable[[client.ApiClient, str], Any]]] = {
    "create a pod": (
        ("", "pods", "create"),
        lambda c, ns: client.CoreV1Api(c).create_namespaced_pod(
            ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
    ),
    "delete a pod": (("", "pods", "delete"), lambda c, ns: client.CoreV1Api(c).delete_namespaced_pod("p", ns)),
    "exec in a pod": (
        ("", "pods/exec", "create"),
        lambda c, ns: c.call_api(
            f"/api/v1/namespaces/{ns}/pods/p/exec",
            "POST",
            query_params=[("command", "sh")],
            auth_settings=["BearerToken"],
        ),
    ),
    "read a secret": (
        ("", "secrets", "get"),
        lambda c, ns: client.CoreV1Api(c).read_namespaced_secret("mlpipeline-minio-artifact", ns),
    ),
    "list secrets": (("", "secrets", "list"), lambda c, ns: client.CoreV1Api(c).list_namespaced_secret(ns)),
    "read a ConfigMap": (
        ("", "configmaps", "get"),
        lambda c, ns: client.CoreV1Api(c).read_namespaced_config_map("kfp-launcher", ns),
    ),
    "delete its namespace": (("", "namespaces", "delete"), lambda c, ns: client.CoreV1Api(c).delete_namespace(ns)),
    "bind itself a role": (
        ("rbac.authorization.k8s.io", "rolebindings", "create"),
        lambda c, ns: client.RbacAuthorizationV1Api(c).create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": "escalate"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "default-editor", "namespace": ns}],
            },
        ),
    ),
    "replace a job": (
        ("kubeflow.org", "pytorchjobs", "update"),
        lambda c, ns: client.CustomObjectsApi(c).replace_namespaced_custom_object(
            "kubeflow.org", "v1", ns, "pytorchjobs", "j", {"metadata": {"name": "j"}}
        ),
    ),
    "delete every job": (
        ("kubeflow.org", "pytorchjobs", "deletecollection"),
        lambda c, ns: client.CustomObjectsApi(c).delete_collection_namespaced_custom_object(
            "kubeflow.org", "v1", ns, "pytorchjobs"
        ),
    ),
    "change a job's status": (
        ("kubeflow.org", "pytorchjobs/status", "patch"),
        lambda c, ns: client.CustomObjectsApi(c).patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", ns, "pytorchjobs", "j", {"status": {}}
        ),
    ),
    "list TrainingRuntimes": (
        ("trainer.kubeflow.org", "trainingruntimes", "list"),
        lambda c, ns: client.CustomObjectsApi(c).list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainingruntimes"
        ),
    ),
    "change a TrainingRuntime": (
        ("trainer.kubeflow.org", "trainingruntimes", "patch"),
        lambda c, ns: client.CustomObjectsApi(c).patch_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainingruntimes", "team-torch", {"metadata": {"labels": {}}}
        ),
    ),
    "delete a TrainingRuntime": (
        ("trainer.kubeflow.org", "trainingruntimes", "delete"),
        lambda c, ns: client.CustomObjectsApi(c).delete_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainingruntimes", "team-torch"
        ),
    ),
    "list ClusterTrainingRuntimes": (
        ("trainer.kubeflow.org", "clustertrainingruntimes", "list"),
        lambda c, ns: client.CustomObjectsApi(c).list_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"
        ),
    ),
    "delete a ClusterTrainingRuntime": (
        ("trainer.kubeflow.org", "clustertrainingruntimes", "delete"),
        lambda c, ns: client.CustomObjectsApi(c).delete_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "torch-distributed"
        ),
    ),
    "read another namespace's jobs": (
        ("kubeflow.org", "pytorchjobs", "list"),
        lambda c, ns: client.CustomObjectsApi(c).list_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs"
        ),
    ),
}


def test_the_account_cannot_do_what_it_must_not(cluster: ControlPlane, admin: client.ApiClient) -> None:
    """Each request of :data:`FORBIDDEN`, as the bound account (multi-user, runtime reader bound): 403, and
    authorized as the grant it names (so the refusal is the authorizer's, for that grant)."""
    namespace = new_namespace(admin)
    account = bind(cluster, admin, setting="default-editor", namespace=namespace)
    answered: dict[str, Call] = {}
    with account_client(cluster, account) as api_client:
        for what, (_, request) in FORBIDDEN.items():
            before = len(api_client.recorded())
            with pytest.raises(ApiException):
                request(api_client, namespace)
            (answered[what],) = api_client.recorded()[before:]
    wrong = {
        what: (call.grant, call.status)
        for what, call in answered.items()
        if call.status != 403 or call.grant != FORBIDDEN[what][0]
    }
    assert wrong == {}


def test_attributes_follow_the_api_servers_request_parsing() -> None:
    """The recorder's parsing on the requests the backend makes (requestinfo.go's rules, see :func:`attributes`)."""
    ns = "https://h/api/v1/namespaces/team"
    jobs = "https://h/apis/kubeflow.org/v1/namespaces/team/pytorchjobs"
    assert attributes("GET", f"{ns}/pods", [("labelSelector", "a=b")])[:3] == ("list", "", "pods")
    assert attributes("GET", f"{ns}/pods", [("watch", True)])[:3] == ("watch", "", "pods")
    assert attributes("GET", f"{ns}/pods/p/log", [("follow", True)])[:3] == ("get", "", "pods/log")
    assert attributes("POST", jobs, None)[:4] == ("create", "kubeflow.org", "pytorchjobs", "team")
    assert attributes("PATCH", f"{jobs}/j", None)[:3] == ("patch", "kubeflow.org", "pytorchjobs")
    assert attributes("DELETE", f"{jobs}/j", None)[0] == "delete"
    assert attributes("DELETE", jobs, None)[0] == "deletecollection"
    assert attributes("DELETE", "https://h/api/v1/namespaces/team", None)[:3] == ("delete", "", "namespaces")
    assert attributes("GET", "https://h/apis/kubeflow.org", None)[2] == ""  # discovery: a non-resource URL
    assert attributes("GET", "https://h/apis/kubeflow.org/v2beta1", None)[2] == ""
    cluster_scoped = "https://h/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed"
    assert attributes("GET", cluster_scoped, None) == (
        "get",
        "trainer.kubeflow.org",
        "clustertrainingruntimes",
        "",
        "torch-distributed",
    )

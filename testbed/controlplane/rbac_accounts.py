"""deploy/rbac on the real API server: its files, the grants their rules make, and a namespace's account bound as
docs/cluster.md says, its token from the TokenRequest API, waited for until the authorizer grants what was applied,
and a client holding only that token (what a launch step's pod has)."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client

from testbed import REPO_ROOT, reference
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.rbac_requests import Grant, RecordingClient

RBAC_DIR = REPO_ROOT / "deploy" / "rbac"
# How long a test waits for what it applied to reach the authorizer.
SETTLE_S = 30.0


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


def admin_client(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    """The admin's client (a test module's fixture), with what a cluster administrator applies once per cluster:
    the ClusterRole of clusterrole-runtime-reader.yaml and its binding as the file has it, and Trainer's
    torch-distributed ClusterTrainingRuntime (what examples/manifests/trainjob.yaml names)."""
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

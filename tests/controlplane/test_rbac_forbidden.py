"""deploy/rbac under the real authorizer: the launch step's account, bound as docs/cluster.md says, is refused what
it must never do, whatever the backend needs (create or exec in a pod, read a secret, bind itself a role, change a
job's status, touch runtimes or another namespace): each request made as the account, refused 403 for the grant it
would need. What the backend does need: test_rbac.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import admin_fixture, bare_cluster_fixture  # noqa: F401
from testbed.controlplane.rbac_accounts import account_client, bind, new_namespace
from testbed.controlplane.rbac_requests import Call, Grant

pytestmark = suite.MARKS


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

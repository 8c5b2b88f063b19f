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


Request = Callable[[client.ApiClient, str], Any]
JOBS = ("kubeflow.org", "pytorchjobs")
JOBS_STATUS = ("kubeflow.org", "pytorchjobs/status")
RUNTIMES = ("trainer.kubeflow.org", "trainingruntimes")
CLUSTER_RUNTIMES = ("trainer.kubeflow.org", "clustertrainingruntimes")


def _custom(grant: Grant, version: str, method: str, *args: Any, where: str | None = "") -> tuple[Grant, Request]:
    """The grant and a CustomObjectsApi request that needs it: ``method`` on the grant's group and resource (its
    plural: a subresource's object) at ``version``, in the test's namespace (``where`` empty), in namespace
    ``where``, or cluster-wide (None), with ``args`` after the plural."""
    group, resource, _ = grant
    plural = resource.split("/")[0]

    def request(c: client.ApiClient, ns: str) -> Any:
        namespace = () if where is None else (where or ns,)
        return getattr(client.CustomObjectsApi(c), method)(group, version, *namespace, plural, *args)

    return grant, request


# What the account must not do, whatever the backend needs: each request, as the account, and the grant it would
# need. A SubjectAccessReview would ask the same authorizer; making the request shows the refusal itself.
FORBIDDEN: dict[str, tuple[Grant, Request]] = {
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
    "replace a job": _custom(
        (*JOBS, "update"), "v1", "replace_namespaced_custom_object", "j", {"metadata": {"name": "j"}}
    ),
    "delete every job": _custom((*JOBS, "deletecollection"), "v1", "delete_collection_namespaced_custom_object"),
    "change a job's status": _custom(
        (*JOBS_STATUS, "patch"), "v1", "patch_namespaced_custom_object_status", "j", {"status": {}}
    ),
    "list TrainingRuntimes": _custom((*RUNTIMES, "list"), "v1alpha1", "list_namespaced_custom_object"),
    "change a TrainingRuntime": _custom(
        (*RUNTIMES, "patch"), "v1alpha1", "patch_namespaced_custom_object", "team-torch", {"metadata": {"labels": {}}}
    ),
    "delete a TrainingRuntime": _custom(
        (*RUNTIMES, "delete"), "v1alpha1", "delete_namespaced_custom_object", "team-torch"
    ),
    "list ClusterTrainingRuntimes": _custom(
        (*CLUSTER_RUNTIMES, "list"), "v1alpha1", "list_cluster_custom_object", where=None
    ),
    "delete a ClusterTrainingRuntime": _custom(
        (*CLUSTER_RUNTIMES, "delete"), "v1alpha1", "delete_cluster_custom_object", "torch-distributed", where=None
    ),
    "read another namespace's jobs": _custom((*JOBS, "list"), "v1", "list_namespaced_custom_object", where="default"),
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

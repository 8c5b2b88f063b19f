"""The operators on the real control plane run as their releases deploy them: each as its own ServiceAccount, bound
only to the roles its release binds it to (testbed/controlplane/kubeflow_operators.py, ``Operator.roles``), never as
the admin. So a permission a release lacks for what a test makes its operator do fails that test module (``for_tests``
reads each operator's log for the API server's Forbidden answers once the module is done): here, the check itself,
on JobSet with its ClusterRoleBinding taken away."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.kubeflow_operators import OPERATORS, binding, operator_bin_dirs, release_roles
from testbed.controlplane.namespaces import ready_namespace

pytestmark = suite.MARKS

NAMESPACE = "kftrain-operator-rbac"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    yield from for_tests(operators=("jobset",), denials_expected=True)


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Iterator[Any]:
    with cluster.api_client() as api_client:
        ready_namespace(api_client, NAMESPACE)
        yield api_client


def test_the_operator_authenticates_as_its_releases_service_account(cluster: ControlPlane, api: Any) -> None:
    """The token in the operator's kubeconfig is its ServiceAccount's (a SelfSubjectReview made with it)."""
    config = yaml.safe_load((cluster.root / "jobset" / "tmp" / "kubeconfig").read_text())
    token = config["users"][0]["user"]["token"]
    configuration = client.Configuration()
    configuration.host = cluster.server
    configuration.ssl_ca_cert = str(cluster.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as as_operator:
        review = client.AuthenticationV1Api(as_operator).create_self_subject_review({})
    op = OPERATORS["jobset"]
    assert review.status.user_info.username == f"system:serviceaccount:{op.namespace}:{op.service_account}"
    assert "system:masters" not in (review.status.user_info.groups or [])


def test_a_permission_taken_from_the_operator_shows_in_what_the_module_checks(cluster: ControlPlane, api: Any) -> None:
    """Without its ClusterRoleBinding, JobSet cannot create a JobSet's Jobs: the API server's Forbidden answer is in
    its log, which is what every other module is checked for."""
    rbac = client.RbacAuthorizationV1Api(api)
    share = operator_bin_dirs(["jobset"])["jobset"].parent / "share"
    (manager_role, *_) = release_roles(share, OPERATORS["jobset"])
    name = manager_role["metadata"]["name"]
    assert cluster.denied_operators() == {}
    rbac.delete_cluster_role_binding(name)
    try:
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "denied"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [{"name": "c", "image": "example.com/train:1"}],
                                    }
                                }
                            }
                        },
                    }
                ]
            },
        }
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", jobset
        )
        deadline = time.monotonic() + WAIT_S
        while "jobset" not in cluster.denied_operators():
            assert time.monotonic() < deadline, cluster.log_tail("jobset")
            time.sleep(0.2)
        account = "system:serviceaccount:jobset-system:jobset-controller-manager"
        assert any(account in line for line in cluster.denied_operators()["jobset"])
    finally:
        rbac.create_cluster_role_binding(binding(manager_role, OPERATORS["jobset"]))

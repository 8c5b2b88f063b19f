"""testbed/controlplane/rbac_requests.py's parsing of a request into what the API server authorizes it as, on the
requests the backend makes (k8s.io/apiserver@v0.36.3:pkg/endpoints/request/requestinfo.go's rules)."""

from __future__ import annotations

from testbed.controlplane.rbac_requests import attributes


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

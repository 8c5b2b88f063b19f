"""deploy/rbac: the Role the launch step needs grants exactly what the Kubernetes backend uses, bound to the
accounts KFP runs steps as."""

from __future__ import annotations

from typing import Any

import yaml

from testbed.reference import REPO

RBAC_DIR = REPO / "deploy/rbac"


def _rbac_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_rbac_role_grants_exactly_what_the_backend_uses() -> None:
    (role,) = [d for d in _rbac_docs() if d["kind"] == "Role"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    job_verbs = {"create", "get", "list", "watch", "delete", "patch"}
    read = {"get", "list", "watch"}
    assert granted == {
        ("kubeflow.org", "tfjobs"): job_verbs,
        ("kubeflow.org", "pytorchjobs"): job_verbs,
        ("kubeflow.org", "mpijobs"): job_verbs,
        ("trainer.kubeflow.org", "trainjobs"): job_verbs,
        ("trainer.kubeflow.org", "trainingruntimes"): {"get", "create"},
        ("", "pods"): read,
        ("", "pods/log"): read,
        ("", "events"): read,
    }
    text = "\n".join(p.read_text() for p in RBAC_DIR.glob("*.yaml"))
    assert "*" not in text
    # A TrainJob's ClusterTrainingRuntime is cluster-scoped: a ClusterRole grants reading it, and nothing else.
    (cluster_role,) = [d for d in _rbac_docs() if d["kind"] == "ClusterRole"]
    assert cluster_role["rules"] == [
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": ["get"]}
    ]
    (binding,) = [d for d in _rbac_docs() if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]


def test_rbac_bindings_target_the_accounts_kfp_runs_steps_as() -> None:
    """Single-user KFP runs steps as pipeline-runner; multi-user Kubeflow runs them in each profile's
    namespace as default-editor. Each binding grants exactly the launcher Role."""
    docs = _rbac_docs()
    (role,) = [d for d in docs if d["kind"] == "Role"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
    subjects = sorted((s["kind"], s["name"]) for b in bindings for s in b["subjects"])
    assert subjects == [("ServiceAccount", "default-editor"), ("ServiceAccount", "pipeline-runner")]

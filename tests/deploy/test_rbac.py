"""deploy/rbac: the Role the launch step needs grants exactly what the Kubernetes backend uses, on every kind of
:data:`kftrain.job.kinds.KINDS` (a plural it lacks is a 403 for every job of that kind), bound to the accounts KFP
runs steps as."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kftrain.job.kinds import KINDS, Kind
from testbed.reference import REPO

RBAC_DIR = REPO / "deploy/rbac"
# What the Kubernetes backend does to a job of any kind (kftrain/backends/kubernetes/api.py: create_job, get_job,
# job_collection's list and watch, patch_job, delete_job).
JOB_VERBS = {"create", "get", "list", "watch", "delete", "patch"}
# What it does to the jobs' pods, logs and events (api.py): pod_collection lists and watches the pods by label,
# pod_log and follow_pod_log read a container's log, events_of and pod_events_with_reason list events; the step's
# store lookup reads its own pod by name (kftrain/storage/kfp_store.py); nothing reads an event by name, or
# watches events (tests/controlplane/test_rbac.py shows each grant used).
POD_VERBS = {"get", "list", "watch"}
LOG_VERBS = {"get"}
EVENT_VERBS = {"list"}


def _rbac_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def role_grants() -> dict[tuple[str, str], set[str]]:
    """The verbs the launcher Role grants, by (API group, resource)."""
    (role,) = [d for d in _rbac_docs() if d["kind"] == "Role"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


@pytest.mark.parametrize("kind", list(KINDS), ids=[f"{k.spec.kind}-{k.spec.version}" for k in KINDS])
def test_rbac_role_grants_the_backend_every_kind(kind: Kind) -> None:
    granted = role_grants().get((kind.spec.group, kind.spec.plural), set())
    assert granted == JOB_VERBS, (
        f"deploy/rbac/role.yaml grants {sorted(granted)} on {kind.spec.plural}.{kind.spec.group}; the Kubernetes "
        f"backend uses {sorted(JOB_VERBS)} on every {kind.spec.kind}"
    )


def test_rbac_role_grants_exactly_what_the_backend_uses() -> None:
    jobs = {(k.spec.group, k.spec.plural): JOB_VERBS for k in KINDS}
    assert role_grants() == {
        **jobs,
        # A TrainJob's namespaced runtime: read before the job is created, created when the job's file carries it.
        ("trainer.kubeflow.org", "trainingruntimes"): {"get", "create"},
        ("", "pods"): POD_VERBS,
        ("", "pods/log"): LOG_VERBS,
        ("", "events"): EVENT_VERBS,
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

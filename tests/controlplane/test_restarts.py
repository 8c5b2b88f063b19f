"""How many failures a job absorbs before it fails, decided by the real controllers, beside the local backend's count.

training-operator v1.9.0 restarts a PyTorchJob's replicas and counts their restarts across the job; the Job controller
of kube-controller-manager 1.36.3 restarts mpi-operator v0.8.2's launcher and each replicated Job of a TrainJob
(JobSet v0.12.0, Trainer v2.3.0), counting that Job's pods alone; a pod restarted in place (OnFailure) counts by
its restartCount, a replaced one (Never in a Job) by the failed pods; training-operator replaces a pod killed by a
signal under ExitCode without counting it. The node agent fails each replica's container as the case plans
(testbed/restart_cases.py), and kftrain's Kubernetes backend reports how the job ended: the same verdict, after the
same number of failures, as the local backend gives the same job in tests/backends/local/test_restarts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from kftrain.retry import RetryPolicy
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import api_fixture, node_fixture, operated_cluster_fixture  # noqa: F401
from testbed.controlplane.node_agent import RUN, SUCCEED, NodeAgent, Plans, fail, job_of
from testbed.polling import wait_until
from testbed.restart_cases import COUNTED, Counted, on_restarting_runtime

pytestmark = suite.MARKS

NAMESPACE = "kftrain-restarts"
# Long enough for the Job controller's pod-failure back-off (10 s before a replacement pod) and the operators.
WAIT_S = 120.0
ON_CLUSTER = [c for c in COUNTED if not c.not_on_cluster]
PLANS = Plans()
THEN = {"run": RUN, "succeed": SUCCEED}


def test_every_case_the_cluster_cannot_run_says_why() -> None:
    assert [c.id for c in COUNTED if c.not_on_cluster] == ["mpijob-v1-launcher-never"]


@pytest.mark.parametrize("case", ON_CLUSTER, ids=lambda c: c.id)
def test_the_real_controllers_absorb_as_many_failures_as_the_local_backend(
    case: Counted, cluster: ControlPlane, node: NodeAgent, api: Any, tmp_path: Path
) -> None:
    PLANS[case.name] = {
        label: fail(case.exit_code, f"failing {label}", failures=n, then=case.then) if n else THEN[case.then]
        for label, n in case.pod_failures().items()
    }
    job = load_manifest(case.yaml(tmp_path))
    job.metadata.namespace = NAMESPACE
    config = KubernetesConfig(namespace=NAMESPACE, log_drain_s=0.5, retry=RetryPolicy(attempts=2, initial_s=0.1))
    result = KubernetesBackend(config, api_client=api).run(job, timeout=WAIT_S)
    said = f"{result.describe()}\nnode errors: {node.errors[-3:]}"
    assert result.phase is case.phase, said
    failed = [pod["metadata"]["name"] for pod in node.failures if job_of(pod) == case.name]
    assert len(failed) == case.failed_runs, f"{failed}\n{said}"


# A failurePolicy JobSet v0.12.0's webhook refuses while the feature gates it needs are off (their default): the
# runtime is admitted (its CRD's enums hold them), but Trainer cannot create the TrainJob's JobSet, and says so in an
# event (kubeflow/trainer@v2.3.0:pkg/controller/trainjob_controller.go, TrainJobResourcesCreationFailed).
GATED = [
    (
        "tj-gated-action",
        {"rules": [{"name": "again", "action": "RestartJob"}]},
        "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when RestartJob feature "
        "gate is disabled",
        "failurePolicy.rules[0].action",
    ),
    (
        "tj-gated-strategy",
        {"restartStrategy": "InPlaceRestart"},
        "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled",
        "failurePolicy.restartStrategy",
    ),
]
EVENT_WAIT_S = 60.0


@pytest.mark.parametrize(("name", "policy", "denial", "field"), GATED, ids=[g[0] for g in GATED])
def test_a_failure_policy_jobset_refuses_kftrain_refuses(
    name: str, policy: dict[str, Any], denial: str, field: str, api: Any
) -> None:
    runtime, trainjob = yaml.safe_load_all(on_restarting_runtime(name, ["true"], f"{name}-runtime", policy))
    with pytest.raises(JobSpecError) as refused:
        load_manifest(yaml.safe_dump_all([runtime, trainjob]))
    assert field in refused.value.field, refused.value
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    group, version = trainjob["apiVersion"].split("/")
    custom.create_namespaced_custom_object(group, version, NAMESPACE, "trainingruntimes", runtime)
    custom.create_namespaced_custom_object(group, version, NAMESPACE, "trainjobs", trainjob)
    said: list[str] = []

    def denied() -> bool:
        events = core.list_namespaced_event(
            NAMESPACE, field_selector=f"involvedObject.name={name},reason=TrainJobResourcesCreationFailed"
        ).items
        said[:] = [str(e.message) for e in events]
        return any(denial in m for m in said)

    wait_until(denied, EVENT_WAIT_S, f"Trainer's TrainJobResourcesCreationFailed event for {name}")
    assert any(denial in m and "denied the request" in m for m in said), said
    jobsets = custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets")["items"]
    assert name not in [js["metadata"]["name"] for js in jobsets]

"""deploy/rbac under the real authorizer: the launch step's service account, bound as docs/cluster.md says, can make
every request kftrain's Kubernetes backend makes in a job's life, and nothing the backend never asks for.

The API server authorizes by RBAC alone; the admin is in ``system:masters`` (testbed/controlplane/apiserver.py,
ADMIN_GROUP). Each test binds an account of its own namespace as the setting under test says (single-user KFP:
``pipeline-runner`` in ``kubeflow``; multi-user Kubeflow: ``default-editor``) with the runtime reader
(testbed/controlplane/rbac_accounts.py); a client holding only its token drives :class:`KubernetesBackend`: submit,
reattach, wait, the ``kftrain jobs`` views, delete. No operator runs, so the admin plays its part. Each request is
recorded as what the API server authorizes it as (testbed/controlplane/rbac_requests.py): none may be refused, the
Role's grants must be exactly those used, and removing any one grant must get a 403 on the call that used it.
What the account must never do: test_rbac_forbidden.py.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import uuid
from collections.abc import Callable
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
from testbed import REPO_ROOT
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import admin_fixture, bare_cluster_fixture  # noqa: F401
from testbed.controlplane.rbac_accounts import (
    Account,
    account_client,
    bind,
    grants,
    new_namespace,
    runtime_reader,
    the_role,
    without,
)
from testbed.controlplane.rbac_requests import Call, Grant, RecordingClient

pytestmark = suite.MARKS

EXAMPLES = REPO_ROOT / "examples" / "manifests"
# How long a test waits for a job's wait to end.
WAIT_S = 30.0


# --- the cluster and the account under test ---------------------------------------------------------


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

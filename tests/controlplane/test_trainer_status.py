"""Kubeflow Trainer's status server, the real one, beside kftrain's local one (kftrain.backends.local.status_server).

The control plane runs JobSet and Trainer with ``TrainJobStatus`` on; a TrainJob's trainer node posts with the
endpoint, CA and token Trainer gives it (testbed/controlplane/trainer_node.py), authenticated through the API
server's OpenID discovery. The same requests go to kftrain's local status server: every answer must be the real
one's (status code and metav1.Status reason), naming the same field when it refuses a report, or be listed in
:data:`LOCAL_DIFFERS` with why.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kftrain.backends.local.status_server import MAX_BODY, StatusServer
from kftrain.job.kinds import KINDS, kind_of
from kftrain.job.kinds.trainjob.options import TrainJobOptions
from kftrain.job.kinds.trainjob.policies import STATUS_MOUNT_PATH, status_path
from kftrain.job.manifest.load import render_manifest
from kftrain.job.request import JobRequest
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.namespaces import install_cluster_runtimes, ready_namespace
from testbed.controlplane.node_agent import RUN, NodeAgent
from testbed.controlplane.trainer_node import Answer, Credentials, node_credentials, post
from testbed.controlplane.trainer_node import report as node_report

pytestmark = suite.MARKS

NAMESPACE = "kftrain-status"
OTHER_NAMESPACE = "kftrain-status-other"
JOB = "tj-status"
OTHER_JOB = "tj-elsewhere"
WAIT_S = 90.0
NOW = "2026-11-28T03:00:00Z"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    yield from for_tests(operators=("jobset", "trainer"))


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Iterator[Any]:
    with cluster.api_client() as api_client:
        ready_namespace(api_client, NAMESPACE)
        ready_namespace(api_client, OTHER_NAMESPACE)
        install_cluster_runtimes(api_client)
        yield api_client


@dataclass(frozen=True)
class Target:
    """One status server and the credentials a node of the job is given for it."""

    url: str
    ca_pem: str
    token: str
    other_job_token: str  # a token for another TrainJob's endpoint
    other_namespace_token: str  # for this job's endpoint, but of a pod in another namespace

    def at(self, path: str) -> str:
        return self.url.split("/apis/", 1)[0] + path


@dataclass(frozen=True)
class Running:
    pod: dict[str, Any]
    real: Target


@pytest.fixture(scope="module")
def running(cluster: ControlPlane, api: Any) -> Iterator[Running]:
    """The TrainJob, one node, its pod running on the node agent; the node's credentials as the kubelet fills them."""
    request = JobRequest(
        "TrainJob", image="example.com/train:1", command=["python", "train.py"], options=TrainJobOptions(num_nodes=1)
    )
    kind = KINDS.get("TrainJob")
    job = request.to_job(JOB, runtimes=kind.runtimes_from_env())
    job.metadata.namespace = NAMESPACE
    spec = kind_of(job).spec
    custom = client.CustomObjectsApi(api)
    with NodeAgent(cluster, outcome=lambda pod: RUN):
        custom.create_namespaced_custom_object(spec.group, spec.version, NAMESPACE, spec.plural, render_manifest(job))
        pod = _running_pod(api, spec.pod_job_label)
        credentials = node_credentials(api, pod)
        core = client.CoreV1Api(api)
        real = Target(
            credentials.url,
            credentials.ca_pem,
            credentials.token,
            other_job_token=_token(core, NAMESPACE, _audience(NAMESPACE, OTHER_JOB)),
            other_namespace_token=_token(core, OTHER_NAMESPACE, _audience(NAMESPACE, JOB)),
        )
        yield Running(pod, real)
        custom.delete_namespaced_custom_object(spec.group, spec.version, NAMESPACE, spec.plural, JOB)


def _audience(namespace: str, name: str) -> str:
    # kubeflow/trainer@v2.3.0:pkg/statusserver/utils.go, TokenAudience
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def _token(core: Any, namespace: str, audience: str) -> str:
    request = {"spec": {"audiences": [audience], "expirationSeconds": 3600}}
    return str(core.create_namespaced_service_account_token("default", namespace, request).status.token)


def _running_pod(api: Any, label: str) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + WAIT_S
    while True:
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"{label}={JOB}", _preload_content=False)
        pods = [p for p in yaml.safe_load(listed.data)["items"] if p["status"].get("phase") == "Running"]
        if pods:
            found: dict[str, Any] = pods[0]
            return found
        assert time.monotonic() < deadline, f"no running pod of {JOB}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Target, list[Mapping[str, Any]]]]:
    """kftrain's local status server for the same job, and the reports it passed on."""
    reports: list[Mapping[str, Any]] = []
    folder = tmp_path_factory.mktemp("status")
    server = StatusServer(NAMESPACE, JOB, folder / "job", reports.append)
    other = StatusServer(NAMESPACE, OTHER_JOB, folder / "other", lambda status: None)
    endpoint = server.start()
    other.start()
    try:
        ca_pem = Path(endpoint.ca_cert).read_text()
        yield Target(endpoint.url, ca_pem, server.token, other.token, other.token), reports
    finally:
        server.stop()
        other.stop()


# --- the table ------------------------------------------------------------------------------------------------------

TRAINER_STATUS = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 60,
    "metrics": [{"name": "loss", "value": "0.5"}],
    "lastUpdatedTime": NOW,
}


def report(**changes: Any) -> bytes:
    status = {**TRAINER_STATUS, **changes}
    return json.dumps({"trainerStatus": {k: v for k, v in status.items() if v is not None}}).encode()


@dataclass(frozen=True)
class Row:
    id: str
    body: bytes
    code: int  # what Trainer's status server answers
    reason: str = ""  # its metav1.Status reason ('' for a 200)
    field: str = ""  # the field an Invalid answer names
    auth: str = "own"  # own | none | basic | lowercase | other-job | other-namespace
    path: str = "own"  # own | root | other-job
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()


BIG = json.dumps({"trainerStatus": {**TRAINER_STATUS, "pad": "x" * MAX_BODY}}).encode()
ROWS = [
    Row("a-report", report(), 200),
    Row("empty-update", b"{}", 200),
    Row("null-status", b'{"trainerStatus": null}', 200),
    Row("lowercase-bearer", report(), 200, auth="lowercase"),
    Row("progress-over-100", report(progressPercentage=101), 422, "Invalid", field="progressPercentage"),
    Row("progress-negative", report(progressPercentage=-1), 422, "Invalid", field="progressPercentage"),
    Row("progress-fraction", report(progressPercentage=40.5), 422, "Invalid"),
    Row("eta-negative", report(estimatedRemainingSeconds=-5), 422, "Invalid", field="estimatedRemainingSeconds"),
    Row("no-update-time", report(lastUpdatedTime=None), 422, "Invalid", field="lastUpdatedTime"),
    Row("update-time-not-a-time", report(lastUpdatedTime="yesterday"), 422, "Invalid"),
    Row("metric-name-empty", report(metrics=[{"name": "", "value": "1"}]), 422, "Invalid", "metrics[0].name"),
    Row("metric-value-65", report(metrics=[{"name": "x", "value": "1" * 65}]), 422, "Invalid", field="metrics[0]"),
    Row("257-metrics", report(metrics=[{"name": str(i), "value": "1"} for i in range(257)]), 422, "Invalid", "metrics"),
    Row("not-json", b"progress 40", 422, "Invalid"),
    Row("a-list", b"[]", 422, "Invalid"),
    Row("no-token", report(), 403, "Forbidden", auth="none"),
    Row("basic-scheme", report(), 403, "Forbidden", auth="basic"),
    Row("another-jobs-token", report(), 403, "Forbidden", auth="other-job"),
    Row("another-namespaces-token", report(), 403, "Forbidden", auth="other-namespace"),
    Row("get", b"", 404, "NotFound", method="GET"),
    Row("post-to-root", report(), 404, "NotFound", path="root"),
    Row("post-to-another-job", report(), 403, "Forbidden", path="other-job"),
    Row("over-64-kib", BIG, 413, "RequestEntityTooLarge"),
    Row("over-64-kib-no-token", BIG, 413, "RequestEntityTooLarge", auth="none"),
    Row("over-64-kib-to-root", BIG, 413, "RequestEntityTooLarge", path="root"),
    Row("bad-content-length", report(), 400, auth="none", headers=(("Content-Length", "4x"),)),
]

# Where kftrain's local server must answer otherwise, by row: (its code, why).
LOCAL_DIFFERS: dict[str, tuple[int, str]] = {
    "post-to-another-job": (
        404,
        "the local server serves one job's endpoint, so another job's path is not found; Trainer's serves every "
        "TrainJob's path and refuses the token, whose audience names another job",
    ),
}


def send(target: Target, row: Row) -> Answer:
    paths = {
        "own": target.url,
        "root": target.at("/"),
        "other-job": target.at(status_path(NAMESPACE, OTHER_JOB)),
    }
    tokens = {"own": target.token, "other-job": target.other_job_token, "other-namespace": target.other_namespace_token}
    authorization = {"none": None, "basic": f"Basic {target.token}", "lowercase": f"bearer {target.token}"}
    return post(
        paths[row.path],
        row.body,
        ca_pem=target.ca_pem,
        token=tokens.get(row.auth),
        authorization=authorization.get(row.auth),
        method=row.method,
        headers=dict(row.headers),
    )


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_the_local_status_server_answers_as_trainers(
    row: Row, running: Running, local: tuple[Target, list[Mapping[str, Any]]]
) -> None:
    real = send(running.real, row)
    assert (real.code, real.reason) == (row.code, row.reason), f"Trainer answered {real.code}: {real.body}"
    mine = send(local[0], row)
    if row.id in LOCAL_DIFFERS:
        assert mine.code == LOCAL_DIFFERS[row.id][0], mine.body
        return
    assert (mine.code, mine.reason) == (real.code, real.reason), f"local {mine.body} / Trainer {real.body}"
    if row.field:
        assert row.field in real.message and row.field in mine.message, (real.message, mine.message)


def test_the_nodes_endpoint_is_trainers_and_what_it_posts_lands_on_the_trainjob(
    api: Any, running: Running, local: tuple[Target, list[Mapping[str, Any]]]
) -> None:
    """The env Trainer gave the node names its status server and this job's path, the files under the mount kftrain
    models; a report it posts is on ``status.trainerStatus``, where kftrain's Kubernetes backend reads it, as the
    local server hands it on."""
    env = {e["name"]: e.get("value") for e in running.pod["spec"]["containers"][0]["env"]}
    url = urllib.parse.urlsplit(running.real.url)
    # plugins/trainjobstatus/trainjobstatus.go createEnvVars: the webhook Service's name, the operator's namespace.
    assert (url.scheme, url.hostname, url.path) == (
        "https",
        "kubeflow-trainer-controller-manager.kubeflow-system.svc",
        status_path(NAMESPACE, JOB),
    )
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == f"{STATUS_MOUNT_PATH}/ca.crt"
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{STATUS_MOUNT_PATH}/token"
    status = {**TRAINER_STATUS, "progressPercentage": 75, "metrics": [{"name": "accuracy", "value": "0.9"}]}
    for target in (running.real, local[0]):
        assert node_report(Credentials(target.url, target.ca_pem, target.token), status).code == 200
    custom = client.CustomObjectsApi(api)
    spec = KINDS.get("TrainJob").spec
    obj = custom.get_namespaced_custom_object(spec.group, spec.version, NAMESPACE, spec.plural, JOB)
    assert KINDS.get("TrainJob").reported_progress(obj) == status
    assert local[1][-1] == status

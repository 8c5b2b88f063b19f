"""What a real kube-apiserver admits, beside what ``kftrain validate`` says: every example manifest and Trainer's
runtimes admitted as they are (nothing pruned, no warning) by the API server (testbed/controlplane: kube-apiserver and
etcd built from Go modules, the operators' CRDs installed, no operator running); its processes out of the test run's
signals; the pinned version served; and each ``security_context`` the launch step refuses refused on a pod too.
Bad inputs: test_admission_bad_input.py.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed import REPO_ROOT, reference
from testbed.controlplane import suite
from testbed.controlplane.admission import Manifest, create, example_files, kftrain_validate, load, not_kept
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.module_fixtures import bare_cluster_fixture, custom_fixture  # noqa: F401
from testbed.pod_security import RESTRICTED, SECURITY_CONTEXT_REFUSED

pytestmark = suite.MARKS

NAMESPACE = "kftrain-admission"


# --- what must be admitted --------------------------------------------------------------------------


def test_examples_cover_every_kind() -> None:
    kinds = {load(p)["kind"] for p in example_files()}
    assert kinds == {"TFJob", "PyTorchJob", "MPIJob", "TrainJob"}


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_is_admitted(
    path: Path, cluster: ControlPlane, custom: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load(path)
    answer = create(cluster, custom, manifest, NAMESPACE)
    assert not answer.refused, answer.body.get("message")
    assert answer.warnings == []
    assert not_kept(manifest, answer.body) == []
    code, said = kftrain_validate(path, capsys)
    assert code == 0, said


@pytest.mark.parametrize(
    "path",
    sorted(reference.RUNTIMES_DIR.glob("*.yaml"))
    or [pytest.param(None, marks=pytest.mark.skip(reason=f"{reference.RUNTIMES_DIR} is missing"))],
)
def test_trainer_runtime_is_admitted(path: Path, cluster: ControlPlane, custom: Any) -> None:
    """Trainer v2.3.0's own ClusterTrainingRuntimes, the ones the example TrainJob names: its CRDs admit them."""
    manifest = load(path)
    answer = create(cluster, custom, manifest, NAMESPACE)
    assert not answer.refused, answer.body.get("message")
    assert answer.warnings == []
    assert not_kept(manifest, answer.body) == []


def test_no_process_of_the_plane_gets_the_signals_sent_to_the_test_run(cluster: ControlPlane) -> None:
    """Each process leads a session of its own, out of the test run's process group: a Ctrl-C or a timeout's
    SIGTERM to that group reaches pytest alone, which stops the plane in order (kube-apiserver before etcd); the
    processes still die with the thread that started them if pytest is killed outright."""
    for name, proc in cluster.processes.items():
        assert os.getsid(proc.pid) == proc.pid, name
        assert os.getpgid(proc.pid) != os.getpgrp(), name


def test_serves_the_pinned_version(cluster: ControlPlane, record_property: Callable[[str, object], None]) -> None:
    """The binaries are the ones testbed/controlplane/go.mod pins."""
    go_mod = (REPO_ROOT / "testbed" / "controlplane" / "go.mod").read_text().split()
    pinned = go_mod[go_mod.index("k8s.io/kubernetes") + 1]
    with cluster.api_client() as api_client:
        assert client.VersionApi(api_client).get_code().git_version == pinned
    record_property("start_s", round(cluster.started_in_s, 2))
    record_property("rss_mib", {name: rss >> 20 for name, rss in cluster.rss_bytes().items()})


# --- a pod's securityContext ---------------------------------------------------------------


def pod_with(security_context: Any) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "security-context"},
        "spec": {"containers": [{"name": "c", "image": "example.com/train:1", "securityContext": security_context}]},
    }


@pytest.fixture(scope="module")
def pods(custom: Any) -> Any:
    """CoreV1Api, with the namespace's ``default`` ServiceAccount a pod is admitted with (the ServiceAccount
    admission plugin looks it up; no controller here creates it)."""
    core = client.CoreV1Api(custom.api_client)
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
    return core


@pytest.mark.parametrize(
    ("given", "field"), SECURITY_CONTEXT_REFUSED, ids=[f"{f}-{g}" for g, f in SECURITY_CONTEXT_REFUSED]
)
def test_a_security_context_the_launch_step_refuses_the_api_server_refuses_on_a_pod(
    given: Any, field: str, pods: Any
) -> None:
    """The launch step's ``security_context`` rules (kftrain/job/pod_checks.py, security_context), judged on the
    pod an operator would create with it (a dry run): the API server refuses each one kftrain refuses
    (tests/launch/test_inputs_validation.py), and admits what the restricted level asks for. One refusal of
    kftrain's is not the API server's: an unknown field, which the operator's CRD prunes from the job."""
    with pytest.raises(ApiException) as refused:
        pods.create_namespaced_pod(NAMESPACE, pod_with(given), dry_run="All")
    # Where the API server says the fault is, the field kftrain names: a value of the wrong type fails the body's
    # decoding (400, Go's path without indexes), an invalid one its validation (422, the field's path).
    message = json.loads(refused.value.body)["message"]
    path = "spec.containers.securityContext" if refused.value.status == 400 else "spec.containers[0].securityContext"
    assert field.replace("security_context", path) in message, message
    pods.create_namespaced_pod(NAMESPACE, pod_with(RESTRICTED), dry_run="All")

"""The fake API server (testbed/fake_k8s) answers the launch step's requests as kube-apiserver 1.36.3 does.

Every fast-tier test of the Kubernetes backend talks to the fake; here each request the step makes
(kftrain/backends/kubernetes/api.py: create, get, patch and delete a job, list and watch jobs and pods, pod logs,
events by field selector, discovery), and the ways a user can make them fail, is sent through the real ``kubernetes``
client to both servers, and what comes back (the HTTP status, the Status reason, the fields the step reads) is
compared. The real server is the judge: a row where the fake answers otherwise is a bug in the fake, fixed there, or
listed in :data:`MUST_DIFFER` with the reason it may differ.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kftrain.backends.kubernetes.api import KubeApi
from kftrain.retry import RetryPolicy
from testbed import reference
from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.fake_k8s import FakeKube
from testbed.manifests import pytorchjob

pytestmark = suite.MARKS

NAMESPACE = "kftrain-fake-check"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
Outcome = Any
QUIET_WINDOW_S = 5


@dataclass
class Side:
    """One server, as the step reaches it: an API client, and the namespace the rows work in."""

    name: str
    api: client.ApiClient
    custom: client.CustomObjectsApi = field(init=False)
    core: client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.custom, self.core = client.CustomObjectsApi(self.api), client.CoreV1Api(self.api)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    yield from for_tests()


@pytest.fixture(scope="module")
def real(cluster: ControlPlane) -> Iterator[Side]:
    with cluster.api_client() as api:
        # No pod is created here, so no ServiceAccount is waited for (no kube-controller-manager runs).
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        yield Side("real", api)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    kube = FakeKube(reference.required(reference.CRD_DIR)).start()
    try:
        path = kube.write_kubeconfig(tmp_path_factory.mktemp("fake") / "kubeconfig", NAMESPACE)
        api = config.new_client_from_config(config_file=str(path))
        with api:
            yield Side("fake", api)
    finally:
        kube.stop()


# --- what comes back, as the step reads it ---------------------------------------------------------------------


def failure(exc: ApiException) -> tuple[int, str]:
    """(HTTP status, the Status's reason) of a refused request."""
    try:
        reason = json.loads(exc.body or "{}").get("reason", "")
    except ValueError:
        reason = "(no Status body)"
    return exc.status, reason


def outcome(call: Callable[[], Any]) -> Outcome:
    """The call's answer, or ("refused", status, reason)."""
    try:
        return call()
    except ApiException as exc:
        return ("refused", *failure(exc))


def job(name: str, **spec: Any) -> dict[str, Any]:
    return pytorchjob({"Master": 1}, name=name, **spec)


def create(side: Side, body: dict[str, Any], namespace: str = NAMESPACE) -> dict[str, Any]:
    return side.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def get(side: Side, name: str) -> dict[str, Any]:
    return side.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)


def delete(side: Side, name: str) -> None:
    side.custom.delete_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, body=client.V1DeleteOptions(propagation_policy="Background")
    )


def meta_keys(obj: dict[str, Any]) -> list[str]:
    """The metadata the step reads of a job it created (its uid for the pods' owner check and events, its
    resourceVersion to watch from, its creationTimestamp for events' age)."""
    wanted = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "generation")
    return [k for k in wanted if obj["metadata"].get(k) not in (None, "")]


# --- the rows: each takes a side and a job name of its own, and returns what the step would see ------------------


def created(side: Side, name: str) -> Outcome:
    return meta_keys(create(side, job(name)))


def created_twice(side: Side, name: str) -> Outcome:
    create(side, job(name))
    return outcome(lambda: create(side, job(name)))


def refused_by_schema(side: Side, name: str) -> Outcome:
    body = job(name)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    return outcome(lambda: create(side, body))


def named_with_capitals(side: Side, name: str) -> Outcome:
    return outcome(lambda: create(side, job(name.upper())))


def in_a_missing_namespace(side: Side, name: str) -> Outcome:
    return outcome(lambda: create(side, job(name), namespace="no-such-namespace"))


def unknown_field(side: Side, name: str) -> Outcome:
    body = job(name)
    body["spec"]["noSuchField"] = 1
    return outcome(lambda: sorted(create(side, body)["spec"]))


def got_missing(side: Side, name: str) -> Outcome:
    return outcome(lambda: get(side, name))


def patched_spec(side: Side, name: str) -> Outcome:
    """What resuming a suspended job does (KubeApi.patch_job: a merge patch of spec.runPolicy.suspend)."""
    first = create(side, job(name, runPolicy={"suspend": True}))
    after = side.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"runPolicy": {"suspend": False}}}
    )
    return {
        "suspend": after["spec"]["runPolicy"]["suspend"],
        "generation": after["metadata"].get("generation"),
        "new resourceVersion": after["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"],
    }


def patched_missing(side: Side, name: str) -> Outcome:
    return outcome(
        lambda: side.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"runPolicy": {"suspend": False}}}
        )
    )


def deleted(side: Side, name: str) -> Outcome:
    create(side, job(name))
    delete(side, name)
    return outcome(lambda: get(side, name))


def deleted_missing(side: Side, name: str) -> Outcome:
    return outcome(lambda: delete(side, name))


def listed_by_name(side: Side, name: str) -> Outcome:
    """The step's job collection (KubeApi.job_collection): the namespace's jobs of that name."""
    create(side, job(name))
    create(side, job(name + "-other"))
    listed = side.custom.list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, field_selector=f"metadata.name={name}"
    )
    names = [o["metadata"]["name"] for o in listed["items"]]
    return {"names": names, "rv": bool(listed["metadata"]["resourceVersion"])}


def watched_from_create(side: Side, name: str) -> Outcome:
    """The step watches its job from the version its create returned: it sees what changed after, not the create."""
    made = create(side, job(name, runPolicy={"suspend": True}))
    side.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, {"metadata": {"labels": {"seen": "yes"}}}
    )
    return first_event(side, name, resource_version=made["metadata"]["resourceVersion"])


def watched_without_version(side: Side, name: str) -> Outcome:
    """A watch with no version starts with the present state, as ADDED events."""
    create(side, job(name))
    return first_event(side, name)


def job_watch(stream: watch.Watch, side: Side, name: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """The step's watch of its job (KubeApi.job_collection: the namespace's jobs of that name)."""
    return stream.stream(
        side.custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        field_selector=f"metadata.name={name}",
        **kwargs,
    )


def first_event(side: Side, name: str, **kwargs: Any) -> Outcome:
    """The first event of a watch of the job: its type (and the object's labels), or how the watch was refused."""
    stream = watch.Watch()
    done = threading.Timer(10.0, stream.stop)  # a watch that shows nothing ends the row, with nothing
    done.start()
    try:
        for event in job_watch(stream, side, name, timeout_seconds=10, **kwargs):
            obj = event["object"]
            if event["type"] == "ERROR":
                return ("ERROR", obj.get("code"), obj.get("reason"))
            labels = (obj.get("metadata") or {}).get("labels") or {}
            return (event["type"], labels)
        return "nothing"
    except ApiException as exc:
        return ("refused", *failure(exc))
    finally:
        done.cancel()
        stream.stop()


def watched_quiet_window(side: Side, name: str) -> Outcome:
    """One watch window of the step (allowWatchBookmarks, a server-side timeout) in which its job does not change
    while another job of the namespace does: what comes, and whether its version is newer than the other job's
    change (the step resumes its next window from it)."""
    made = create(side, job(name))
    other = threading.Timer(1.0, lambda: changed.append(create(side, job(name + "-other"))))
    changed: list[dict[str, Any]] = []
    other.start()
    seen = []
    try:
        for event in job_watch(
            watch.Watch(),
            side,
            name,
            resource_version=made["metadata"]["resourceVersion"],
            allow_watch_bookmarks=True,
            timeout_seconds=QUIET_WINDOW_S,
        ):
            seen.append((event["type"], int(event["object"]["metadata"]["resourceVersion"])))
    finally:
        other.join()
    newest = int(changed[0]["metadata"]["resourceVersion"])
    # The kinds of event, each once: kube-apiserver sends its pre-timeout bookmark once or twice (its bookmark
    # timer's buckets are whole seconds, k8s.io/apiserver@v0.36.3:pkg/storage/cacher/cacher.go, "if you set fire
    # time at X, you can get the bookmark within (X-1,X+1) period").
    return sorted({(kind, rv >= newest) for kind, rv in seen})


def pods_by_label(side: Side, name: str) -> Outcome:
    listed = side.core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={name}")
    return {"items": listed.items, "rv": bool(listed.metadata.resource_version)}


def log_of_missing_pod(side: Side, name: str) -> Outcome:
    return outcome(lambda: side.core.read_namespaced_pod_log(name, NAMESPACE))


def events_by(selector: str) -> Callable[[Side, str], Outcome]:
    def row(side: Side, name: str) -> Outcome:
        return outcome(
            lambda: side.core.list_namespaced_event(NAMESPACE, field_selector=selector.format(name=name)).items
        )

    return row


def served_versions(side: Side, name: str) -> Outcome:
    """What the step's discovery finds (KubeApi.served_versions: the group, then each version's resources)."""
    return KubeApi(RetryPolicy(), api_client=side.api).served_versions(GROUP, PLURAL)


def created_with_status(side: Side, name: str) -> Outcome:
    """Status is a subresource of every job's CRD: a create does not set it."""
    body = job(name)
    body["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    return "status" in create(side, body)


def patched_status(side: Side, name: str) -> Outcome:
    """A patch of the job itself leaves its status alone, and changes no generation."""
    create(side, job(name))
    after = side.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    )
    return {"status": after.get("status"), "generation": after["metadata"].get("generation")}


def patched_invalid(side: Side, name: str) -> Outcome:
    """A patch is validated as a create is."""
    create(side, job(name))
    patch = {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": "one"}}}}
    return outcome(lambda: side.custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, patch))


def defaulted_port(side: Side, name: str) -> Outcome:
    """The CRD's defaults are filled in on create (a container port's protocol)."""
    body = job(name)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 23456}
    ]
    made = create(side, body)
    return made["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["ports"]


ROWS: dict[str, Callable[[Side, str], Outcome]] = {
    "create a job": created,
    "create a job of a name taken": created_twice,
    "create a job its CRD's schema refuses": refused_by_schema,
    "create a job named with capitals": named_with_capitals,
    "create a job in a namespace that does not exist": in_a_missing_namespace,
    "create a job with a field its CRD does not know": unknown_field,
    "create a job with a status": created_with_status,
    "create a job whose CRD defaults a field": defaulted_port,
    "get a job that does not exist": got_missing,
    "merge-patch a job's spec": patched_spec,
    "merge-patch a job that does not exist": patched_missing,
    "merge-patch a job's status through the job": patched_status,
    "merge-patch a job into one its schema refuses": patched_invalid,
    "delete a job (Background), then get it": deleted,
    "delete a job that does not exist": deleted_missing,
    "list jobs by name": listed_by_name,
    "watch a job from its create's version": watched_from_create,
    "watch a job with no version": watched_without_version,
    "a watch window in which only another job changes": watched_quiet_window,
    "list a job's pods by label": pods_by_label,
    "log of a pod that does not exist": log_of_missing_pod,
    "events about an object": events_by("involvedObject.name={name}"),
    "Warning events of a reason": events_by("type=Warning,reason=FailedCreatePod"),
    "pod events of a reason": events_by("involvedObject.kind=Pod,reason=FailedScheduling"),
    "events by a field the API server does not select on": events_by("message={name}"),
    "discovery of pytorchjobs": served_versions,
}

# Rows where the fake answers otherwise, each with why it may.
MUST_DIFFER: dict[str, str] = {}


@pytest.mark.parametrize("row", list(ROWS))
def test_the_fake_answers_as_kube_apiserver_does(row: str, real: Side, fake: Side) -> None:
    name = "fake-check-" + row.lower().replace(" ", "-").replace("'", "").replace("(", "").replace(")", "")
    name = "".join(c for c in name if c.isalnum() or c == "-")[:50].rstrip("-")
    seen = {}
    for side in (real, fake):
        try:
            seen[side.name] = ROWS[row](side, name)
        finally:
            with contextlib.suppress(ApiException):
                for obj in side.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]:
                    delete(side, obj["metadata"]["name"])
    if row in MUST_DIFFER:
        assert seen["real"] != seen["fake"], f"{row}: the fake now agrees ({seen}); drop its MUST_DIFFER entry"
    else:
        assert seen["fake"] == seen["real"], f"{row}: real {seen['real']!r}, fake {seen['fake']!r}"


def test_every_reason_to_differ_names_a_row() -> None:
    assert set(MUST_DIFFER) <= set(ROWS)

"""A credential refused after the create (a token that expired mid-launch): the step says the job was created,
where it is, and whether deleting it worked, in one line; no traceback. A server that stalls or storms (a create
never answered, 429s with ``Retry-After: 3600``) ends the step by its timeout or a SIGTERM, the job deleted or said
to be left, and where."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from kftrain.errors import KftrainError
from kftrain.retry import RetryPolicy
from kftrain.signals import Terminated
from testbed.fake_k8s import FakeKube
from testbed.k8s_harness import make_backend, pytorch_job, stamped


@pytest.mark.parametrize("delete_refused", [False, True], ids=["delete-works", "delete-refused"])
def test_a_401_after_the_create_names_the_job_and_what_its_delete_did(kube: FakeKube, delete_refused: bool) -> None:
    kube.fault("401", method="GET", times=10_000)  # every read after the create
    if delete_refused:
        kube.fault("401", method="DELETE", times=10_000)
    backend, out = make_backend(kube)
    with pytest.raises(KftrainError) as caught:
        backend.run(stamped(pytorch_job(), "run-1", "task-1"))
    line = str(caught.value)
    assert "\n" not in line and "HTTP 401" in line, line
    (where,) = [said.split("created ", 1)[1] for said in out.getvalue().splitlines() if "created PyTorchJob" in said]
    if delete_refused:
        assert f"{where} was created and is left on the cluster: deleting it failed" in line, line
        assert len(kube.jobs_of("pytorchjobs")) == 1
    else:
        assert f"deleted {where}" in out.getvalue(), out.getvalue()
        assert not kube.jobs_of("pytorchjobs")


# -- every network wait ends by a whole-call deadline, a stop included (issue 52, class 2) ----------------------

STORM = 10_000  # every matching request of the test
STOP_S = 2.0  # the time a stop is given, short for the test (20 s in use)


def _storm(kube: FakeKube, methods: tuple[str, ...], retry_after: str) -> None:
    for method in methods:
        kube.fault("429", method=method, times=STORM, retry_after=retry_after)


# name: (methods stormed after the create, Retry-After, whether the delete gets through)
STORMS = {
    "429 Retry-After 3600 on every read": (("GET",), "3600", True),
    "429 Retry-After 3600 on every read and delete": (("GET", "DELETE"), "3600", False),
    "429 Retry-After 1 on every read and delete": (("GET", "DELETE"), "1", False),
}


def _storm_backend(kube: FakeKube) -> tuple[Any, Any]:
    # The policy in use (6 tries, waits to 10 s), and watches that ride over an outage: only deadlines end this.
    return make_backend(kube, retry=RetryPolicy(), outage_s=300.0, stop_s=STOP_S, call_deadline_s=60.0)


@pytest.mark.parametrize("storm", list(STORMS))
def test_a_storm_after_the_create_ends_the_step_by_its_timeout(kube: FakeKube, storm: str) -> None:
    methods, retry_after, deletes = STORMS[storm]
    backend, out = _storm_backend(kube)
    handle = backend.submit(stamped(pytorch_job(), "run-1", "task-1"))
    _storm(kube, methods, retry_after)
    started = time.monotonic()
    result = backend.wait(handle, timeout=1.0)
    took = time.monotonic() - started
    assert took < 1.0 + STOP_S / 2 + STOP_S + 3.0, (took, out.getvalue())  # the timeout, then explain and delete
    assert result.reason == "Timeout" and "\n" not in result.message.split("\nrecent events")[0], result.message
    if deletes:
        assert result.message.endswith("; deleted the job"), result.message
        assert not kube.jobs_of("pytorchjobs")
    else:
        assert f"PyTorchJob default/{handle.name} was created and is left on the cluster" in result.message
        assert "HTTP 429" in result.message, result.message
        assert len(kube.jobs_of("pytorchjobs")) == 1


@pytest.mark.parametrize("storm", list(STORMS))
def test_sigterm_in_a_storm_ends_the_step_and_deletes_or_says_where_the_job_is(kube: FakeKube, storm: str) -> None:
    methods, retry_after, deletes = STORMS[storm]
    backend, out = _storm_backend(kube)
    _storm(kube, methods, retry_after)  # the create is a POST: it gets through
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises((Terminated, KftrainError)) as caught:
            backend.run(stamped(pytorch_job(), "run-1", "task-1"), timeout=None)
    finally:
        timer.cancel()
    took = time.monotonic() - started
    assert took < 1.0 + STOP_S + 3.0, (took, out.getvalue())
    if deletes:
        assert isinstance(caught.value, Terminated) and "deleted PyTorchJob" in out.getvalue(), out.getvalue()
        assert not kube.jobs_of("pytorchjobs")
    else:
        line = str(caught.value)
        assert "\n" not in line and "was created and is left on the cluster" in line and "HTTP 429" in line, line
        assert len(kube.jobs_of("pytorchjobs")) == 1


def test_a_create_never_answered_ends_by_the_step_timeout(kube: FakeKube) -> None:
    held = kube.fault("hold", path="/pytorchjobs$", method="POST")
    backend, _ = make_backend(kube, call_deadline_s=60.0)
    started = time.monotonic()
    try:
        with pytest.raises(KftrainError) as caught:
            backend.run(stamped(pytorch_job(), "run-1", "task-1"), timeout=1.5)
        took = time.monotonic() - started
    finally:
        held.released.set()
    line = str(caught.value)
    assert took < 1.5 + 3.0, took
    assert "\n" not in line and "create PyTorchJob default/" in line and ": no whole answer within 1." in line, line
    assert "it may yet be created: kubectl -n default get pytorchjobs.kubeflow.org " in line, line


@pytest.mark.parametrize("retry_after", ["3600", "1"])
def test_jobs_list_in_a_storm_ends_by_its_deadline_with_one_line(kube: FakeKube, retry_after: str) -> None:
    backend, _ = make_backend(kube, retry=RetryPolicy(), call_deadline_s=3.0)
    _storm(kube, ("GET",), retry_after)
    started = time.monotonic()
    with pytest.raises(KftrainError) as caught:
        backend.list_jobs()
    took = time.monotonic() - started
    line = str(caught.value)
    assert took < 3.0 + 2.0, took
    assert "\n" not in line and line.startswith(f"kubernetes backend: {kube.url}: list ") and "HTTP 429" in line, line

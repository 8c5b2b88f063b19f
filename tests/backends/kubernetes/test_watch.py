"""What the Kubernetes backend asks of the API server while it waits: watches (never a periodic request), a broken
watch resumed from the version it saw or listed afresh (as client-go decides), an outage ridden over, and the one retry
policy of its calls."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from kftrain.backends.kubernetes.api import is_transient
from kftrain.backends.kubernetes.backoff import ServerKeepsFailing
from kftrain.retry import RetryPolicy, call_with_retry
from testbed.fake_k8s import FakeKube, Fault, JobSim, OperatorSim
from testbed.k8s_harness import FAST_RETRY, make_backend, pytorch_job, running, s_forever, s_success, succeed


def _job_lists(kube: FakeKube) -> list[str]:
    return [p for m, p in kube.requests if m == "GET" and "/pytorchjobs?" in p and "watch=" not in p]


def _break_watches(kube: FakeKube, times: int, action: str = "reset") -> None:
    """Answer the next ``times`` watch requests with ``action``: a reset drops the connection without answering (the
    client's own pool retries some of them), a status is an HTTP error."""
    kube.faults.append(Fault(action=action, path=r"/pytorchjobs$", method="GET", query="watch=", times=times))


# What a broken watch does next, as client-go's reflector decides it (k8s.io/client-go@v0.36.3:tools/cache/
# reflector.go, isWatchErrorRetriable and watchWithResync): a connection refused or dropped, or a 429, resumes from
# the version seen; another error lists afresh first.
BREAKS = [("reset", False), ("429", False), ("500", True), ("503", True)]


@pytest.mark.parametrize(("action", "relists"), BREAKS)
def test_a_broken_watch_resumes_from_the_version_it_saw_unless_the_server_answered_an_error(
    action: str, relists: bool, kube: FakeKube, operator: OperatorSim
) -> None:
    operator.scenario = s_success
    _break_watches(kube, times=4, action=action)  # more than one try of the watch
    backend, out = make_backend(kube)
    result = backend.run(pytorch_job(), timeout=20)
    assert result.succeeded, (result.describe(), out.getvalue())
    assert "[master-0] hello from master-0" in out.getvalue()
    # The job created here is watched from its create: no list unless a try lists afresh.
    assert bool(_job_lists(kube)) == relists, _job_lists(kube)


def test_watch_broken_every_time_gives_up_after_the_retry_policy(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_forever
    _break_watches(kube, times=1000)
    backend, _ = make_backend(kube)
    with pytest.raises(ServerKeepsFailing) as raised:
        backend.run(pytorch_job(), timeout=20)
    said = str(raised.value)  # one line naming the server, the watch and the last failure
    assert re.fullmatch(
        rf"the API server at http://127\.0\.0\.1:\d+ kept failing the watch of PyTorchJob default/\S+: "
        rf"{FAST_RETRY.attempts} tries in a row over \d+\.\ds, the last: \S.*",
        said,
    ), said
    assert _job_lists(kube) == []  # every try resumed: nothing was answered
    assert kube.jobs_of("pytorchjobs") == []  # Backend.run cancels the job it cannot follow


def test_the_watches_ride_over_an_outage_of_outage_s(kube: FakeKube, operator: OperatorSim) -> None:
    """More failed tries than the retry policy's attempts, within ``outage_s``: the wait goes on and the job's end is
    reported (a step rides over a kube-apiserver restart: tests/controlplane/test_launch_life.py)."""
    operator.scenario = s_success
    _break_watches(kube, times=FAST_RETRY.attempts * 4)
    backend, out = make_backend(kube, outage_s=10.0)
    result = backend.run(pytorch_job(), timeout=30)
    assert result.succeeded, (result.describe(), out.getvalue())


def s_long(sim: JobSim) -> None:
    running(sim, pending_s=0.3)
    for step in range(15):
        for label in sim.labels():
            sim.log(label, f"step {step}")
        sim.sleep(0.1)
    succeed(sim)


def test_waiting_makes_no_periodic_request(kube: FakeKube, operator: OperatorSim) -> None:
    """Over 2 s of a job, Pending pods first, what the launcher asks of the API server does not grow with the
    wait: one watch each of the job and of its pods, from the version the create returned (no list first),
    one log stream per replica, no read of a single pod, and one list of the pods once the job has ended (for
    the runs no stream printed). The watches' windows (a whole minute here) are never cut short."""
    operator.scenario = s_long
    # poll_interval_s: the autoscaler's events are read only for a pod no node took for that long.
    backend, out = make_backend(kube, poll_interval_s=1.0, watch_window_s=60)
    result = backend.run(pytorch_job(workers=2), timeout=30)
    assert result.succeeded, (result.describe(), out.getvalue())
    assert "[worker-1] step 14" in out.getvalue()
    with kube.cond:
        requests = dict(kube.stats.requests)
        peak = dict(kube.stats.peak)
    assert requests == {"create": 1, "watch": 2, "log-follow": 3, "list": 1}, kube.requests
    assert peak == {"watch": 2, "log-follow": 3}


def test_retry_helper_bounds() -> None:
    from kubernetes.client.exceptions import ApiException

    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ApiException(status=503, reason="Service Unavailable")
        return "ok"

    policy = RetryPolicy(attempts=5, initial_s=0.1, max_s=0.15)
    assert call_with_retry(flaky, policy=policy, is_transient=is_transient, what="flaky", sleep=sleeps.append) == "ok"
    assert sleeps == [0.1, 0.15]

    def forbidden() -> None:
        calls.append(1)
        raise ApiException(status=403, reason="Forbidden")

    calls.clear()
    with pytest.raises(ApiException):
        call_with_retry(forbidden, policy=policy, is_transient=is_transient, what="forbidden", sleep=sleeps.append)
    assert len(calls) == 1  # not retried: a 403 will not fix itself

    def broken() -> None:
        calls.append(1)
        raise ConnectionResetError("reset")

    calls.clear()
    with pytest.raises(ConnectionResetError):
        call_with_retry(broken, policy=policy, is_transient=is_transient, what="broken", sleep=lambda s: None)
    assert len(calls) == 5


@pytest.mark.parametrize(
    ("policy", "seconds", "attempts"),
    [
        # 0.5 + 1 + 2 + 4 + 8 = 15.5 s of waits in 5 retries; then 10 s each: 29 more to reach 300 s.
        (RetryPolicy(attempts=6, initial_s=0.5, max_s=10.0), 300.0, 35),
        (RetryPolicy(attempts=6, initial_s=0.5, max_s=10.0), 10.0, 6),  # never fewer tries than the policy's
        (RetryPolicy(attempts=6, initial_s=0.5, max_s=10.0), 0.0, 6),
        (RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0), 300.0, 2),  # no wait adds up to anything
        (RetryPolicy(attempts=2, initial_s=1.0, max_s=1.0), 3.0, 4),
    ],
)
def test_a_policy_lasting_seconds_has_the_tries_its_waits_need(
    policy: RetryPolicy, seconds: float, attempts: int
) -> None:
    assert policy.lasting(seconds).attempts == attempts


def test_a_watch_window_in_which_the_job_does_not_change_resumes_from_its_bookmark(
    kube: FakeKube, operator: OperatorSim
) -> None:
    """The watches ask for bookmarks. In a window in which the job does not change while another job of the namespace
    does, the API server sends a BOOKMARK 2 s before the window ends (tests/controlplane/test_fake_api_server.py shows
    kube-apiserver's), and the next window starts from its version rather than the job's older one: a long quiet job
    then never resumes from a version etcd may have compacted."""
    others: list[int] = []

    def scenario(sim: JobSim) -> None:
        others.append(_another_job_changes(kube))  # at once: well before the first window's bookmark, 2 s in
        running(sim)
        sim.sleep(4.5)  # past the first window (4 s)
        succeed(sim)

    operator.scenario = scenario
    backend, out = make_backend(kube, watch_window_s=4)
    result = backend.run(pytorch_job(), timeout=30)
    assert result.succeeded, (result.describe(), out.getvalue())
    windows = [p for m, p in kube.requests if m == "GET" and "/pytorchjobs?" in p and "watch=" in p]
    assert len(windows) >= 2, windows
    resumed = parse_qs(urlsplit(windows[1]).query)["resourceVersion"][0]
    assert int(resumed) >= others[0], (windows, others)


def _another_job_changes(kube: FakeKube) -> int:
    """A job of the same namespace, not the step's, added to the store (no operator plays it); its version."""
    with kube.cond:
        other = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "other", "uid": "u"}}
        other["metadata"]["namespace"] = "default"
        kube.jobs[("pytorchjobs", "default", "other")] = other
        kube.record("pytorchjobs", "default", "ADDED", other)
        return int(other["metadata"]["resourceVersion"])

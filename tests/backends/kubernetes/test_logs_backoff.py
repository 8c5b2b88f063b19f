"""A replica's log the API server keeps refusing to stream is asked again within the back-off of every list/watch
loop (kftrain/backends/kubernetes/logs.py, kftrain/backends/kubernetes/backoff.py), however often its pod changes."""

from __future__ import annotations

import io
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import JobRef
from kftrain.backends.kubernetes.logs import LogFollower
from kftrain.retry import RetryPolicy

FOR_S = 1.5
# Waits 0.05 s doubling to 0.2 s: in FOR_S at most 1 + 3 + (FOR_S - 0.15) / 0.2 opens; without a back-off, one per
# change of the pod (every 5 ms here: about 300).
BOUND = 1 + 3 + int((FOR_S - 0.15) / 0.2)


class RefusingApi:
    """Every log stream refused, as a server answers a container that is waiting again."""

    retry = RetryPolicy(attempts=10_000, initial_s=0.05, max_s=0.2)
    server = "https://refusing"

    def __init__(self) -> None:
        self.opens = 0

    def follow_pod_log(self, *args: Any, **kwargs: Any) -> Any:
        self.opens += 1
        raise ApiException(status=400, reason="container pytorch is waiting to start")


def _pod(version: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "j-master-0", "uid": "u1", "resourceVersion": str(version), "labels": {}},
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]},
    }


def test_a_log_refused_again_and_again_is_asked_within_the_back_off() -> None:
    api = RefusingApi()
    job = JobRef.make("PyTorchJob", "kubeflow.org/v1", "j", "default")
    follower = LogFollower(api, Console(out=io.StringIO()), job, tail_lines=10)  # type: ignore[arg-type]
    end, version = time.monotonic() + FOR_S, 0
    try:
        while time.monotonic() < end:  # the pod changes every 5 ms (its status rewritten by the kubelet)
            version += 1
            follower.update({"j-master-0": _pod(version)})
            time.sleep(0.005)
    finally:
        follower.finish(0.0, collect=False)
    assert version > 100
    assert 1 <= api.opens <= BOUND, api.opens

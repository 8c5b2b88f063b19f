"""Who restarts each kind's replicas and how their failures count (Kind.backoff, Kind.restart_policy), and the rule
that decides when a failure ends the job (Backoff.spent), as training-operator v1.9.0, mpi-operator v0.8.2, JobSet
v0.12.0 and the Job controller of Kubernetes 1.36.3 apply them. tests/controlplane/test_restarts.py runs jobs of
these kinds on those controllers."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.job import load_manifest
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.restarts import Backoff
from kftrain.job.model import RestartPolicy
from testbed.local_harness import rep
from testbed.manifests import as_yaml, mpijob_v1, mpijob_v2, pytorchjob, replicated_job, training_runtime, trainjob

INT32_MAX = 2**31 - 1


def _trainjob_on(job_spec: dict[str, Any], pod: dict[str, Any]) -> str:
    runtime = training_runtime(replicated_job("node", "node", trainer=True))
    rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    rjob.update(job_spec)
    rjob["template"]["spec"].update(pod)
    job = trainjob(runtime["metadata"]["name"], name="tj", trainer={"numNodes": 2})
    return as_yaml(runtime) + "---\n" + as_yaml(job)


def _mpijob(make: Any, **run_policy: Any) -> dict[str, Any]:
    replicas = {"Launcher": rep(1, "mpi", ["mpirun"], []), "Worker": rep(2, "mpi", None, [])}
    return make(replicas, name="mj", runPolicy=run_policy)


CASES = [
    # training-operator: one count across the job, runPolicy.backoffLimit, none when unset.
    ("pytorchjob", as_yaml(pytorchjob({"Master": rep(1, "pytorch", ["t"], [])}, name="pt")), "Master",
     RestartPolicy.ON_FAILURE, Backoff(None)),
    ("pytorchjob-limit", as_yaml(pytorchjob({"Master": rep(1, "pytorch", ["t"], [])}, runPolicy={"backoffLimit": 2})),
     "Master", RestartPolicy.ON_FAILURE, Backoff(2)),
    ("mpijob-v1-launcher", as_yaml(_mpijob(mpijob_v1, backoffLimit=2)), "Launcher", RestartPolicy.NEVER, Backoff(2)),
    # mpi-operator: the launcher is the batch Job <job>-launcher, whose backoffLimit the API server defaults to 6.
    ("mpijob-v2-launcher", as_yaml(_mpijob(mpijob_v2)), "Launcher", RestartPolicy.ON_FAILURE,
     Backoff(6, job="mj-launcher")),
    ("mpijob-v2-launcher-limit", as_yaml(_mpijob(mpijob_v2, backoffLimit=1)), "Launcher", RestartPolicy.ON_FAILURE,
     Backoff(1, job="mj-launcher")),
    ("mpijob-v2-worker", as_yaml(_mpijob(mpijob_v2, backoffLimit=1)), "Worker", RestartPolicy.NEVER, Backoff(1)),
    # JobSet: each replicated job a batch Job <jobset>-<name>-0, its pods OnFailure unless the runtime says.
    ("trainjob-default", _trainjob_on({}, {}), "node", RestartPolicy.ON_FAILURE, Backoff(6, job="tj-node-0")),
    ("trainjob-never", _trainjob_on({"backoffLimit": 1}, {"restartPolicy": "Never"}), "node", RestartPolicy.NEVER,
     Backoff(1, job="tj-node-0")),
    ("trainjob-per-index", _trainjob_on({"backoffLimitPerIndex": 1}, {"restartPolicy": "Never"}), "node",
     RestartPolicy.NEVER, Backoff(INT32_MAX, job="tj-node-0")),
]  # fmt: skip


@pytest.mark.parametrize(("manifest", "replica_type", "policy", "backoff"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_who_restarts_each_kinds_replicas(
    manifest: str, replica_type: str, policy: RestartPolicy, backoff: Backoff
) -> None:
    job = load_manifest(manifest)
    kind = kind_of(job)
    assert kind.restart_policy(job, replica_type) == policy
    assert kind.backoff(job, replica_type) == backoff


# (policy, limit, the job's, or a batch Job's, exit code, restarts so far) -> retried, then spent
RULES = [
    # In place: the failure whose restart would bring the count to the limit ends the job; a limit of 0 ends it at once.
    (RestartPolicy.ON_FAILURE, 2, None, 1, 0, True, False),
    (RestartPolicy.ON_FAILURE, 2, None, 1, 1, True, True),
    (RestartPolicy.ON_FAILURE, 1, None, 1, 0, True, True),
    (RestartPolicy.ON_FAILURE, 0, None, 1, 0, True, True),
    (RestartPolicy.ALWAYS, 3, "j", 1, 2, True, True),
    (RestartPolicy.ON_FAILURE, None, None, 1, 99, True, False),
    # Replaced: more failed pods than the limit end the job.
    (RestartPolicy.NEVER, 1, "j", 1, 0, True, False),
    (RestartPolicy.NEVER, 1, "j", 1, 1, True, True),
    (RestartPolicy.NEVER, 0, "j", 1, 0, True, True),
    # ExitCode under training-operator: replaced without being counted, unless the limit is 0.
    (RestartPolicy.EXIT_CODE, 1, None, 137, 0, True, False),
    (RestartPolicy.EXIT_CODE, 1, None, 137, 1, True, False),
    (RestartPolicy.EXIT_CODE, 1, None, 137, 99, True, False),
    (RestartPolicy.EXIT_CODE, 0, None, 137, 0, True, True),
    # Not retried at all: Never under training-operator; ExitCode's 1-127, the program's own failure.
    (RestartPolicy.NEVER, 5, None, 1, 0, False, False),
    (RestartPolicy.EXIT_CODE, 5, None, 1, 0, False, False),
]


@pytest.mark.parametrize(("policy", "limit", "job", "code", "restarts", "retried", "spent"), RULES)
def test_when_a_failure_ends_the_job(
    policy: RestartPolicy, limit: int | None, job: str | None, code: int, restarts: int, retried: bool, spent: bool
) -> None:
    backoff = Backoff(limit, job)
    assert backoff.retries(policy, code) is retried
    assert backoff.spent(policy, restarts) is spent

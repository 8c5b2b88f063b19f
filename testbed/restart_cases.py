"""Jobs whose replicas fail a set number of times, with how many failures each absorbs before it fails: one table,
run on the local backend (tests/backends/local/test_restarts.py) and on the real controllers
(tests/controlplane/test_restarts.py), so the local backend's restarts are held to the real ones.

Whoever restarts a replica counts its failures (:class:`kftrain.job.kinds.restarts.Backoff`): training-operator across a
job, or the batch Job that runs it (mpi-operator's launcher; each replicated Job of a TrainJob's JobSet) over that
Job's pods. Each replica runs :data:`FAILING_REPLICA`, which fails its first runs as the case plans, then succeeds or
runs on; on the control plane the node agent does the same with the pod of that replica.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kftrain.backends.base import JobPhase
from testbed.local_harness import rep
from testbed.manifests import (
    as_yaml,
    mpijob_v1,
    mpijob_v2,
    pytorchjob,
    replicated_job,
    training_runtime,
    trainjob,
)
from testbed.programs.failing_replica import FAILED_EXIT

FAILING_REPLICA = Path(__file__).parent / "programs" / "failing_replica.py"
UNSET = "UNSET"  # a variable no replica has: failing_replica.py names the replica 0


@dataclass(frozen=True)
class Counted:
    """A job named ``name`` whose replicas fail ``failures`` times each (by the value of ``id_var`` in the replica:
    its pod is ``<replica>-<value>``) with ``exit_code``, then do ``then`` (``succeed`` or ``run``); how it ends, how
    many failing runs it took, all replicas together, and what its message says."""

    id: str
    name: str
    manifest: Callable[[str, list[str]], str]  # the job's YAML, given its name and the replicas' command
    replica: str
    id_var: str
    failures: dict[str, int]
    then: str
    phase: JobPhase
    failed_runs: int
    says: str = ""
    exit_code: int = FAILED_EXIT
    # Why the real controllers cannot run it here; empty: they do (tests/controlplane/test_restarts.py).
    not_on_cluster: str = ""

    def command(self, counts: Path) -> list[str]:
        """The replicas' program, counting its runs in ``counts``."""
        plan = ",".join(f"{k}={v}" for k, v in self.failures.items())
        return [
            sys.executable,
            str(FAILING_REPLICA),
            str(counts),
            self.id_var or UNSET,
            plan,
            self.then,
            str(self.exit_code),
        ]

    def yaml(self, counts: Path) -> str:
        return self.manifest(self.name, self.command(counts))

    def pod_failures(self) -> dict[str, int]:
        """The failures planned by pod label (``node-1``)."""
        return {f"{self.replica}-{k}": v for k, v in self.failures.items()}


def failed_runs(counts: Path, failures: dict[str, int]) -> int:
    """The failing runs of every replica, from what failing_replica.py counted in ``counts``."""
    runs = {f.name.removeprefix("runs-"): len(f.read_text().splitlines()) for f in counts.iterdir()}
    return sum(min(n, failures.get(replica, 0)) for replica, n in runs.items())


def _trainjob(name: str, command: list[str], runtime: dict[str, Any] | None = None) -> str:
    ref = runtime["metadata"]["name"] if runtime else "torch-distributed"
    job = trainjob(ref, name=name, trainer={"numNodes": 2, "command": command})
    if runtime:
        job["spec"]["runtimeRef"]["kind"] = runtime["kind"]
    return "---\n".join(as_yaml(d) for d in [*([runtime] if runtime else []), job])


def _never_runtime() -> dict[str, Any]:
    """A runtime whose node Job replaces a failed pod (restartPolicy Never) once at most (backoffLimit 1)."""
    runtime = training_runtime(replicated_job("node", "node", trainer=True), name="node-never", kind="TrainingRuntime")
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 1
    job["template"]["spec"]["restartPolicy"] = "Never"
    return runtime


def _restarting_runtime(name: str, failure_policy: dict[str, Any]) -> dict[str, Any]:
    """A runtime whose node Job fails at its first failed pod (restartPolicy Never, backoffLimit 0), and whose JobSet
    then does as ``failure_policy`` says."""
    runtime = training_runtime(replicated_job("node", "node", trainer=True), name=name, kind="TrainingRuntime")
    spec = runtime["spec"]["template"]["spec"]
    spec["failurePolicy"] = failure_policy
    job = spec["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 0
    job["template"]["spec"]["restartPolicy"] = "Never"
    return runtime


def _jobset_restarts(runtime: str, failure_policy: dict[str, Any]) -> Callable[[str, list[str]], str]:
    return lambda name, command: on_restarting_runtime(name, command, runtime, failure_policy)


def on_restarting_runtime(name: str, command: list[str], runtime: str, failure_policy: dict[str, Any]) -> str:
    """A TrainJob ``name`` of 2 nodes running ``command`` on the runtime ``runtime`` (in the same YAML), whose node
    Job fails at its first failed pod and whose JobSet then does as ``failure_policy`` says."""
    return _trainjob(name, command, _restarting_runtime(runtime, failure_policy))


def _launcher(name: str, command: list[str], policy: str, backoff: int | None, api: str = "v2beta1") -> str:
    run_policy = {} if backoff is None else {"runPolicy": {"backoffLimit": backoff}}
    replicas = {"Launcher": rep(1, "mpi", command, [], restart_policy=policy), "Worker": rep(1, "mpi", None, [])}
    make = mpijob_v2 if api == "v2beta1" else mpijob_v1
    return as_yaml(make(replicas, name=name, **run_policy))


def _master(name: str, command: list[str], policy: str = "OnFailure", backoff: int = 2) -> str:
    master = rep(1, "pytorch", command, [], restart_policy=policy)
    run_policy: dict[str, Any] = {"backoffLimit": backoff}
    if policy == "ExitCode":
        run_policy["activeDeadlineSeconds"] = 600  # kftrain refuses ExitCode without a deadline (kftrain.job.validate)
    return as_yaml(pytorchjob({"Master": master}, name=name, runPolicy=run_policy))


KILLED = 137  # how a kill by the kernel (out of memory) or a preemption ends a container


def _exit_code_policy(
    id: str,
    name: str,
    backoff: int,
    failures: int,
    phase: JobPhase,
    failed_runs: int,
    says: str = "",
    exit_code: int = KILLED,
) -> Counted:
    """A PyTorchJob under restartPolicy ExitCode and ``backoff``, whose master fails ``failures`` times with
    ``exit_code`` and then succeeds."""
    manifest = partial(_master, policy="ExitCode", backoff=backoff)
    return Counted(
        id, name, manifest, "master", "RANK", {"0": failures}, "succeed", phase, failed_runs, says, exit_code
    )


COUNTED = [
    # Trainer's runtimes leave restartPolicy and backoffLimit unset: JobSet makes the pods OnFailure and the API
    # server the node Job's backoffLimit 6, counted over both nodes' restarts.
    Counted(
        "trainjob-absorbs-five",
        "tj-five",
        _trainjob,
        "node",
        "PET_NODE_RANK",
        {"0": 2, "1": 3},
        "succeed",
        JobPhase.SUCCEEDED,
        5,
    ),
    Counted(
        "trainjob-fails-at-six",
        "tj-six",
        _trainjob,
        "node",
        "PET_NODE_RANK",
        {"0": 3, "1": 3},
        "run",
        JobPhase.FAILED,
        6,
        "restarting it would make 6 restart(s) of Job tj-six-node-0's pods, and backoffLimit is 6",
    ),
    Counted(
        "trainjob-never-replaced-once",
        "tj-never",
        lambda name, command: _trainjob(name, command, _never_runtime()),
        "node",
        "PET_NODE_RANK",
        {"0": 9},
        "run",
        JobPhase.FAILED,
        2,
        "2 of Job tj-never-node-0's pods have failed, and backoffLimit is 1",
    ),
    # mpi-operator's launcher is a batch Job: under Never a failed launcher pod is replaced; unset, its limit is 6.
    Counted(
        "mpijob-launcher-never-replaced-once",
        "mpi-never",
        lambda name, command: _launcher(name, command, "Never", 1),
        "launcher",
        "",
        {"0": 9},
        "run",
        JobPhase.FAILED,
        2,
        "2 of Job mpi-never-launcher's pods have failed, and backoffLimit is 1",
    ),
    # In place, a replica fails exactly as often as the limit allows and then runs on: failing further, the node
    # agent's count would race the Job controller's verdict (it reports a restart every 0.3 s until the pod goes).
    Counted(
        "mpijob-launcher-default-limit",
        "mpi-default",
        lambda name, command: _launcher(name, command, "OnFailure", None),
        "launcher",
        "",
        {"0": 6},
        "run",
        JobPhase.FAILED,
        6,
        "backoffLimit is 6",
    ),
    # training-operator's own launcher pod, under Never, is not replaced.
    Counted(
        "mpijob-v1-launcher-never",
        "mpi-v1",
        lambda name, command: _launcher(name, command, "Never", 1, api="v1"),
        "launcher",
        "",
        {"0": 9},
        "run",
        JobPhase.FAILED,
        1,
        "launcher-0 exited with code 3",
        not_on_cluster="mpi-operator's v2beta1 CRD is the cluster's mpijobs.kubeflow.org, so training-operator serves "
        "no v1 MPIJob there (testbed/controlplane/kubeflow_operators.py); its rule for Never is the PyTorchJob's",
    ),
    Counted("pytorchjob-absorbs-one", "pt-one", _master, "master", "RANK", {"0": 1}, "succeed", JobPhase.SUCCEEDED, 1),
    Counted(
        "pytorchjob-fails-at-two",
        "pt-two",
        _master,
        "master",
        "RANK",
        {"0": 2},
        "run",
        JobPhase.FAILED,
        2,
        "restarting it would make 2 restart(s) of the job's pods, and backoffLimit is 2",
    ),
    # ExitCode: training-operator replaces a pod killed by a signal (128-255) with a new one; backoffLimit counts none
    # of them unless it is 0 (its requeue count is always 0), so only the job's deadline ends the restarts.
    _exit_code_policy("pytorchjob-exitcode-kills-uncounted", "pt-kills", 1, 3, JobPhase.SUCCEEDED, 3),
    _exit_code_policy("pytorchjob-exitcode-limit-zero", "pt-kill-zero", 0, 1, JobPhase.FAILED, 1, "backoffLimit is 0"),
    # The program's own failure (1-127) is not retried under ExitCode, whatever the limit.
    _exit_code_policy(
        "pytorchjob-exitcode-own-failure",
        "pt-own",
        3,
        1,
        JobPhase.FAILED,
        1,
        "master-0 exited with code 3",
        FAILED_EXIT,
    ),
    # A runtime's JobSet failurePolicy: when a Job fails, JobSet recreates every Job (the whole TrainJob) or fails.
    Counted(
        "trainjob-jobset-restarts-once",
        "tj-restart",
        _jobset_restarts("restart-once", {"maxRestarts": 1}),
        "node",
        "PET_NODE_RANK",
        {"0": 1, "1": 0},
        "succeed",
        JobPhase.SUCCEEDED,
        1,
    ),
    Counted(
        "trainjob-jobset-max-restarts",
        "tj-max",
        _jobset_restarts("max-restarts", {"maxRestarts": 1}),
        "node",
        "PET_NODE_RANK",
        {"0": 9},
        "run",
        JobPhase.FAILED,
        2,
        "failurePolicy (RestartJobSet: no rule matched): 1 of maxRestarts 1 made",
    ),
    Counted(
        "trainjob-jobset-fail-rule",
        "tj-fail-rule",
        _jobset_restarts(
            "fail-rule",
            {
                "maxRestarts": 3,
                "rules": [
                    {
                        "name": "failOnBackoff",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["BackoffLimitExceeded"],
                        "targetReplicatedJobs": ["node"],
                    }
                ],
            },
        ),
        "node",
        "PET_NODE_RANK",
        {"0": 9},
        "run",
        JobPhase.FAILED,
        1,
        "failurePolicy rule 'failOnBackoff' (FailJobSet)",
    ),
    Counted(
        "trainjob-jobset-uncounted-restarts",
        "tj-uncounted",
        _jobset_restarts(
            "uncounted",
            {
                "rules": [
                    {
                        "name": "again",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureMessagePatterns": ["backoff limit"],
                    }
                ]
            },
        ),
        "node",
        "PET_NODE_RANK",
        {"0": 2, "1": 0},
        "succeed",
        JobPhase.SUCCEEDED,
        2,
    ),
]

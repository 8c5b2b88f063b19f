"""How a job on the local backend ends: a failing replica stops the others and is named with its log's last lines,
the restart policies and backoffLimit as whoever restarts the replica applies them (the shared table of
testbed/restart_cases.py), the active deadline and the step's timeout, and a chief's success ending a never-ending
PS."""

from __future__ import annotations

import time

import pytest

from kftrain.backends.base import JobPhase
from kftrain.backends.local import LocalBackend
from kftrain.job import load_manifest
from testbed.local_harness import FAILER, FLAKY, SLEEPER, alive, assert_ok, options, pod_env, program, read_pids, rep
from testbed.manifests import pytorchjob, tfjob
from testbed.restart_cases import COUNTED, failed_runs

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")


def test_failing_replica_fails_the_job_and_stops_the_others(tmp_path, out_dir):
    cmd = program(tmp_path, "failer", FAILER)
    env = pod_env(out_dir)
    m = pytorchjob(
        {
            "Master": rep(1, "pytorch", cmd, env, restart_policy="Never"),
            "Worker": rep(2, "pytorch", cmd, env, restart_policy="Never"),
        },
        name="fj",
    )
    opts = options(tmp_path, log_tail_lines=3)
    started = time.monotonic()
    result = LocalBackend(opts).run(load_manifest(m))
    assert time.monotonic() - started < 10
    assert result.phase is JobPhase.FAILED
    assert result.reason == "ReplicaFailed"
    assert result.exit_code == 3
    assert result.failed_replica == "worker-1"
    assert result.log_tail == ["step 2", "loss nan", "fatal: boom"]
    text = result.describe()
    assert text.startswith("job Failed (ReplicaFailed): worker-1 exited with code 3")
    assert "last 3 log lines of worker-1:\n  step 2\n  loss nan\n  fatal: boom" in text
    pids = read_pids(out_dir)
    assert sorted(pids) == ["fj-master-0", "fj-worker-0", "fj-worker-1"]
    assert [pod for pod, pid in pids.items() if alive(pid)] == []


def test_on_failure_restarts_then_succeeds(tmp_path, out_dir):
    cmd = program(tmp_path, "flaky", FLAKY)
    m = pytorchjob({"Master": rep(1, "pytorch", [*cmd, "fail-once"], pod_env(out_dir), restart_policy="OnFailure")})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert_ok(result, opts)
    assert (out_dir / "runs").read_text() == "xx"
    assert "master-0 exited with code 1; restartPolicy OnFailure: restart 1 in" in opts.out.getvalue()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("policy", "mode", "backoff", "phase", "reason", "exit_code", "runs"),
    [
        ("ExitCode", "exit1", 3, JobPhase.FAILED, "ReplicaFailed", 1, 1),
        ("ExitCode", "kill-once", 3, JobPhase.SUCCEEDED, "Succeeded", 0, 2),
        # ExitCode's replacements count against no limit but 0 (testbed/restart_cases.py has a limit of 1 run past).
        ("ExitCode", "kill-always", 0, JobPhase.FAILED, "BackoffLimitExceeded", 137, 1),
        # In place: the job fails when its pods' restarts reach the limit, so two runs, not three
        # (tests/controlplane/test_restarts.py holds this against training-operator).
        ("OnFailure", "exit1", 2, JobPhase.FAILED, "BackoffLimitExceeded", 1, 2),
        ("OnFailure", "fail-once", 2, JobPhase.SUCCEEDED, "Succeeded", 0, 2),
        ("OnFailure", "exit1", 0, JobPhase.FAILED, "BackoffLimitExceeded", 1, 1),
        ("Never", "kill-once", 3, JobPhase.FAILED, "ReplicaFailed", 137, 1),
        ("Always", "fail-once", 3, JobPhase.SUCCEEDED, "Succeeded", 0, 2),
    ],
)
def test_restart_policies(tmp_path, out_dir, policy, mode, backoff, phase, reason, exit_code, runs):
    cmd = program(tmp_path, "flaky", FLAKY)
    master = rep(1, "pytorch", [*cmd, mode], pod_env(out_dir), restart_policy=policy)
    # (A deadline that never passes here: kftrain refuses ExitCode without one.)
    m = pytorchjob({"Master": master}, runPolicy={"backoffLimit": backoff, "activeDeadlineSeconds": 300})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert (result.phase, result.reason, result.exit_code) == (phase, reason, exit_code), result.describe()
    assert len((out_dir / "runs").read_text()) == runs
    if phase is JobPhase.FAILED:
        assert result.failed_replica == "master-0"
        assert result.log_tail[-1] == f"run {runs} mode {mode}"
    if reason == "BackoffLimitExceeded":
        assert f"backoffLimit is {backoff}" in result.message


def test_active_deadline_stops_the_job(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, pod_env(out_dir))}, runPolicy={"activeDeadlineSeconds": 1})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert (result.phase, result.reason) == (JobPhase.FAILED, "DeadlineExceeded")
    assert 1.0 <= result.duration_s < 5.0
    pids = read_pids(out_dir)
    assert len(pids) == 2
    assert not any(alive(p) for p in pids.values())


def test_timeout_stops_the_job(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    m = tfjob({"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir))}, runPolicy={"activeDeadlineSeconds": 30})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m), timeout=0.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout")
    assert result.duration_s < 4.0
    assert not any(alive(p) for p in read_pids(out_dir).values())


def test_chief_success_stops_a_never_ending_ps(tmp_path, out_dir):
    sleeper = program(tmp_path, "sleeper", SLEEPER)
    chief = program(
        tmp_path,
        "chief",
        "import glob, os, time\n"
        "while not glob.glob(os.path.join(os.environ['OUT_DIR'], 'pid-*')):\n    time.sleep(0.02)\n",
    )
    env = pod_env(out_dir)
    m = tfjob({"Chief": rep(1, "tensorflow", chief, env), "PS": rep(1, "tensorflow", [*sleeper, "--ignore-term"], env)})
    opts = options(tmp_path, grace_period_s=0.3)  # the PS ignores SIGTERM: it must be killed after the grace period
    result = LocalBackend(opts).run(load_manifest(m))
    assert_ok(result, opts)
    assert result.duration_s < 5.0
    assert not alive(read_pids(out_dir)["job-ps-0"])


def test_a_crash_loop_stopped_by_the_deadline_reports_the_replicas_exit_code(tmp_path, out_dir):
    # No backoffLimit: the worker restarts until the deadline ends the job; the verdict must still name it.
    cmd = program(tmp_path, "crasher", 'import sys\nprint("cuda error: out of memory", flush=True)\nsys.exit(7)\n')
    m = tfjob(
        {"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir), restart_policy="OnFailure")},
        runPolicy={"activeDeadlineSeconds": 2},
    )
    result = LocalBackend(options(tmp_path, max_restart_backoff_s=0.1)).run(load_manifest(m))
    assert (result.phase, result.reason) == (JobPhase.FAILED, "DeadlineExceeded")
    assert (result.exit_code, result.failed_replica) == (7, "worker-0")
    assert "worker-0 was crash-looping: it last exited with code 7 after" in result.message
    assert "cuda error: out of memory" in result.describe()


def test_a_job_stopped_by_its_timeout_without_failures_blames_no_replica(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    result = LocalBackend(options(tmp_path)).run(
        load_manifest(tfjob({"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir))})), timeout=0.5
    )
    assert (result.reason, result.failed_replica, result.exit_code) == ("Timeout", None, 0)


@pytest.mark.parametrize("case", COUNTED, ids=lambda c: c.id)
def test_whoever_restarts_a_replica_counts_its_failures(tmp_path, case):
    """The table the real controllers are held to in tests/controlplane/test_restarts.py."""
    counts = tmp_path / "counts"
    counts.mkdir()
    result = LocalBackend(options(tmp_path)).run(load_manifest(case.yaml(counts)), timeout=60)
    said = result.describe()
    assert result.phase is case.phase, said
    assert failed_runs(counts, case.failures) == case.failed_runs, said
    assert case.says in said, said

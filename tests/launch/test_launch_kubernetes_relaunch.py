"""A launch step on Kubernetes that does not end by itself: relaunched by KFP after its pod died (it reattaches to
its job), or sent SIGTERM while it waits (it deletes its job), for each launch of testbed/launch_cluster.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.base import load_identity
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.launch_cluster import (
    LAUNCHES,
    Launch,
    assert_logs_kept,
    expected_namespace,
    start,
    start_step_process,
    step_inputs,
    succeed,
    until_step_says,
)


def s_until_a_second_owner(sim: JobSim) -> None:
    """Runs until a relaunched step has reattached (it adds its pod as an owner), then succeeds."""
    start(sim)
    end = time.monotonic() + 30
    while len(_owners(sim)) < 2:
        assert time.monotonic() < end, "no second launcher reattached within 30 s"
        sim.log(sim.labels()[0], "training")
        sim.sleep(0.05)
    succeed(sim)


def _owners(sim: JobSim) -> list[dict[str, Any]]:
    with sim.kube.cond:
        obj = sim.kube.jobs.get((sim.plural, sim.namespace, sim.name)) or {}
        return list((obj.get("metadata") or {}).get("ownerReferences") or [])


@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.id for launch in LAUNCHES])
def test_relaunched_step_reattaches_to_its_job(
    launch: Launch,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    operator.scenario = s_until_a_second_owner
    first = step_inputs(launch, tmp_path, job_output="job-attempt-1")
    proc = start_step_process(launch, first, tmp_path)
    try:
        end = time.monotonic() + 30
        while not Path(first["job"]).exists():  # the job is created and the step about to wait for it
            assert proc.poll() is None and time.monotonic() < end, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.02)
        proc.kill()  # the launcher pod dies: nothing gets to delete the job
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(kube.jobs_of(launch.plural)) == 1

    monkeypatch.setenv("KFP_POD_NAME", "launch-step-b")  # KFP retries the task in a new pod
    monkeypatch.setenv("KFP_POD_UID", "uid-b")
    second = step_inputs(launch, tmp_path, job_output="job-attempt-2")
    launch.component.python_func(**second)  # returns once the job it reattached to succeeds

    assert "reattached to" in capsys.readouterr().out
    assert len(kube.created) == 1  # exactly one job
    (job,) = kube.jobs_of(launch.plural)
    assert load_identity(second["job"]) == load_identity(first["job"])
    assert load_identity(second["job"]).name == job["metadata"]["name"]
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == ["uid-a", "uid-b"]


@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.id for launch in LAUNCHES])
def test_sigterm_during_the_wait_deletes_the_job(
    launch: Launch,
    kube: FakeKube,
    operator: OperatorSim,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sigterm_outside_the_step: list[int],
) -> None:
    inputs = step_inputs(launch, tmp_path)
    identity = Path(inputs["job"])

    def run_until_terminated(sim: JobSim) -> None:
        start(sim)
        sim.log(sim.labels()[0], "step 1")
        until_step_says(sim, "step 1")  # the step is in its wait, streaming the log
        assert identity.exists()
        os.kill(os.getpid(), signal.SIGTERM)  # the run is cancelled, or the launcher pod evicted
        n = 1
        while True:
            n += 1
            sim.log(sim.labels()[0], f"step {n}")
            sim.sleep(0.05)

    operator.scenario = run_until_terminated
    assert threading.current_thread() is threading.main_thread()  # where the step's SIGTERM handler runs
    with pytest.raises(SystemExit) as ended:
        launch.component.python_func(**inputs)
    assert ended.value.code == 143  # as a shell reports the signal (128 + 15)
    assert sigterm_outside_the_step == []
    out, err = capsys.readouterr()
    name = load_identity(identity).name
    assert f"deleted {launch.kind} {expected_namespace()}/{name}" in out
    assert "terminated (run cancelled or pod evicted)" in err
    assert_logs_kept(out, tmp_path / "model-logs", [label for sim in operator.sims for label in sim.labels()])
    assert "step 1" in (tmp_path / "model-logs" / f"{operator.sims[0].labels()[0]}.log").read_text()
    assert [d[2] for d in kube.deletions] == [name] and kube.jobs_of(launch.plural) == []

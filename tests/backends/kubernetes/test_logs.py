"""Every replica's log through the Kubernetes backend: each line once, whenever the job ends, and the run before a
restart in place."""

from __future__ import annotations

from kftrain.backends.kubernetes.pod_state import replica_label
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import make_backend, pytorch_job


def s_ends_at_once_with_a_restart(sim: JobSim) -> None:
    """Every replica logs and the job succeeds at once; worker-0's container had restarted in place before
    its pod was first seen running (one status update shows it running its second run)."""
    sim.create_pods()
    sim.condition("Created")
    sim.start("master-0", "worker-1")
    sim.log("worker-0", "worker-0 run 1 line 1", "worker-0 run 1 line 2")
    sim.restart_in_place("worker-0", 137)
    for label in sim.labels():
        sim.log(label, f"{label} line 1", f"{label} line 2")
    sim.exit_all(0)
    sim.condition("Succeeded")


def _replica_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("[kftrain]")]


def test_every_replicas_log_once_when_the_job_ends_at_once(kube: FakeKube, operator: OperatorSim) -> None:
    operator.scenario = s_ends_at_once_with_a_restart
    backend, out = make_backend(kube)
    assert backend.run(pytorch_job(workers=2), timeout=20).succeeded
    expected = {f"[{label}] {label} line {i}" for label in ("master-0", "worker-0", "worker-1") for i in (1, 2)}
    expected |= {"[worker-0] worker-0 run 1 line 1", "[worker-0] worker-0 run 1 line 2"}
    assert sorted(_replica_lines(out.getvalue())) == sorted(expected)  # each line, once


def test_every_replicas_log_when_the_job_ended_before_its_pods_were_seen(kube: FakeKube, operator: OperatorSim) -> None:
    """The pod watch has shown no pod when the job is seen ended (its first request is held): the end lists
    them and prints each replica's log whole, and the run before a restart in place by its last lines
    (``previous``)."""
    operator.scenario = s_ends_at_once_with_a_restart
    backend, out = make_backend(kube)
    handle = backend.submit(pytorch_job(workers=2))
    operator.join()  # the job has ended before the wait begins
    hold = kube.fault("hold", path=r"/pods$", method="GET", query="watch=")  # the pod watch's first request
    try:
        result = backend.wait(handle, timeout=20)
    finally:
        hold.released.set()
    assert result.succeeded, (result.describe(), out.getvalue())
    # Either the pod watch's first request was held, or the job's end was seen before the watch thread sent it
    # (on a busy machine it may not have run yet): no pod came from the watch either way, which is the case here.
    assert hold.fired <= 1
    text = out.getvalue()
    expected = {f"[{label}] {label} line {i}" for label in ("master-0", "worker-0", "worker-1") for i in (1, 2)}
    expected |= {"[worker-0] worker-0 run 1 line 1", "[worker-0] worker-0 run 1 line 2"}
    assert sorted(_replica_lines(text)) == sorted(expected)
    assert (
        "[kftrain] worker-0 restarted in place (1 restart(s)); the last 2 log lines of its previous run, which "
        "ended with exit code 137:\n[worker-0] worker-0 run 1 line 1\n[worker-0] worker-0 run 1 line 2\n"
    ) in text
    assert text.index("line 2") < text.index("digits succeeded in")  # the logs come before the verdict


def test_replica_labels() -> None:
    to = {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1"}
    mo = {"training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "3"}
    assert replica_label(to) == "worker-1"
    assert replica_label(mo) == "worker-3"
    assert replica_label({"training.kubeflow.org/job-role": "launcher"}) == "launcher-0"

"""The Kubernetes backend against the fake API server (testbed/fake_k8s), for the tests of its submit, wait and cancel.

A backend here talks to the fake cluster over real HTTP with short intervals everywhere; the scenarios below are
what the simulated operator plays (``operator.scenario = s_success``): it creates pods with the operators'
labels and moves the job through its conditions.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from kftrain.backends.kubernetes import KubernetesConfig
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.job import ReplicaInput, build_job
from kftrain.job.model import TrainingJob
from kftrain.job.naming import stamp_run_identity
from kftrain.retry import RetryPolicy
from testbed.fake_k8s import FakeKube, JobSim

FAST_RETRY = RetryPolicy(attempts=6, initial_s=0.02, max_s=0.1)


def fast_config(**overrides: Any) -> KubernetesConfig:
    """Short intervals everywhere so that each test takes a second or two."""
    values: dict[str, Any] = dict(
        namespace="default",
        poll_interval_s=0.05,
        watch_window_s=1,
        log_drain_s=1.0,
        pending_timeout_s=0.5,
        retry=FAST_RETRY,
        outage_s=0.0,  # the watches give up after FAST_RETRY's tries (a test of the outage sets its own)
        owner_pod_name="",
        owner_pod_uid="",
    )
    values.update(overrides)
    return KubernetesConfig(**values)


def api_client(kube: FakeKube) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = kube.url
    return client.ApiClient(cfg)


def make_backend(kube: FakeKube, **overrides: Any) -> tuple[KubernetesBackend, io.StringIO]:
    """A backend on ``kube`` (:func:`fast_config` with ``overrides``) and what it prints."""
    out = io.StringIO()
    return KubernetesBackend(fast_config(out=out, **overrides), api_client(kube)), out


def stamped(job: TrainingJob, run_id: str, task_id: str) -> TrainingJob:
    """``job`` named and labelled from its run and task, as the launch step submits it."""
    stamp_run_identity(job, run_id, task_id)
    return job


def pytorch_job(workers: int = 1, name: str = "digits") -> TrainingJob:
    return build_job(
        "PyTorchJob",
        name,
        {
            "Master": ReplicaInput(1, command=["python", "train.py"]),
            "Worker": ReplicaInput(workers, command=["python", "train.py"]),
        },
        image="example.com/train:1",
    )


def mpi_job(api_version: str = "kubeflow.org/v2beta1") -> TrainingJob:
    return build_job(
        "MPIJob",
        "allreduce",
        {
            "Launcher": ReplicaInput(1, command=["mpirun", "python", "train.py"]),
            "Worker": ReplicaInput(2),
        },
        image="example.com/mpi:1",
        api_version=api_version,
    )


def until_said(sim: JobSim, out: io.StringIO, text: str, timeout: float = 20.0) -> None:
    """Wait (as the simulated cluster) until the backend's output shows ``text``: it has seen what it reports."""
    end = time.monotonic() + timeout
    while text not in out.getvalue():
        assert time.monotonic() < end, f"the backend did not say {text!r} within {timeout}s:\n{out.getvalue()}"
        sim.sleep(0.02)


# -- scenarios the simulated operator plays, and their parts --------------------------------------------


def running(sim: JobSim, pending_s: float = 0.15) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.sleep(pending_s)  # the log followers see Pending pods first and must wait for them
    sim.start()
    sim.condition("Running")


def succeed(sim: JobSim) -> None:
    for label in sim.labels():
        sim.log(label, f"hello from {label}", "epoch 1 loss 0.5")
    sim.sleep(0.1)
    sim.exit_all(0)
    sim.condition("Succeeded", message=f"{sim.obj['kind']} {sim.name} successfully completed.")


def s_success(sim: JobSim) -> None:
    running(sim)
    succeed(sim)


def s_suspended_forever(sim: JobSim) -> None:
    sim.condition("Created")
    sim.condition("Suspended")
    sim.wait_deleted()


def s_image_pull(sim: JobSim) -> None:
    sim.create_pods()
    sim.condition("Created")
    sim.image_pull_backoff("worker-0")
    sim.wait_deleted()


def forever(label: str) -> Callable[[JobSim], None]:
    """A scenario: the job runs, replica ``label`` logging a step every 50 ms, until it is deleted."""

    def scenario(sim: JobSim) -> None:
        running(sim, pending_s=0.0)
        n = 0
        while True:
            n += 1
            sim.log(label, f"step {n}")
            sim.sleep(0.05)

    return scenario


s_forever = forever("master-0")

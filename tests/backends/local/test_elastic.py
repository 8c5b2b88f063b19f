"""Elastic jobs through the local backend: they change size without changing what is trained.

A PyTorchJob under torchrun shrinks 3 -> 2 (a worker lost: ``LocalBackend.kill_replica``) and grows 2 -> 3
(``LocalBackend.scale``); the trainer's own log shows the same global batch and learning rate at every size,
the rows of every step identical to an uninterrupted run's (so none skipped or repeated within an epoch), and
the final model that run's, up to the order of float sums (its log loss within 0.1%). Every resize happens at a
known step: the trainers hold before a step while ``KFTRAIN_HOLD_FILE`` says so, and each wait below waits for a
line the job logs.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kftrain.backends import LocalBackend, LocalConfig
from kftrain.backends.base import JobResult
from kftrain.job import TrainingJob, load_manifest
from kftrain.steps.evaluate import evaluate_model
from kftrain.steps.prep import prepare_dataset
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from testbed import needs
from testbed.launch_harness import kfp_outputs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(sys.executable).with_name("torchrun").exists(), reason="torchrun not installed"),
]

# 8 epochs of 26 steps: the resizes at steps 60 and 120 are inside the third and fifth.
GLOBAL_BATCH, MICRO_BATCH, EPOCHS, LR = 48, 8, 8, 0.1


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("data") / "digits")
    prepare_dataset(uri)
    return uri


class Log(io.StringIO):
    """The job's console; :meth:`wait_for` waits for a line, never for a time."""

    def wait_for(self, pattern: str, after: int = 0, timeout: float = 240) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.getvalue()[after:], re.MULTILINE)
            if match:
                return after + match.end()
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {pattern!r}; log tail:\n{self.getvalue()[-4000:]}")


@contextlib.contextmanager
def held_run(job: TrainingJob, log: Log, hold: Path) -> Iterator[tuple[LocalBackend, Any, list[JobResult]]]:
    """Submit ``job`` and wait for its end in the background: yields the backend, the job's handle and the list
    its result is appended to. On leaving, the hold file goes (also when a wait failed: the job then runs to its
    end instead of hanging), the waiter is joined and the job cancelled."""
    backend = LocalBackend(LocalConfig(out=log, grace_period_s=2))
    handle = backend.submit(job)
    results: list[JobResult] = []
    waiter = threading.Thread(target=lambda: results.append(backend.wait(handle, timeout=600)))
    waiter.start()
    try:
        yield backend, handle, results
    finally:
        hold.unlink(missing_ok=True)
        waiter.join(timeout=600)
        backend.cancel(handle)


def succeeded(results: list[JobResult], log: Log, tail: int) -> str:
    """The job's whole log, once its result says it succeeded (else the failure, with the log's last ``tail``)."""
    text = log.getvalue()
    assert results and results[0].succeeded, (results[0].describe() if results else "no result") + text[-tail:]
    return text


def elastic_job(name: str, dataset: str, out: Path, env: dict[str, str]):
    args = [
        "--dataset", dataset, "--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
        "--epochs", str(EPOCHS), "--global-batch-size", str(GLOBAL_BATCH), "--batch-size", str(MICRO_BATCH),
        "--lr", str(LR), "--seed", "3", "--checkpoint-every-steps", "20", "--checkpoint-every-epochs", "0",
        "--log-samples",
    ]  # fmt: skip
    # A fresh worker store per rendezvous round: agents whose restart counts diverged after a loss otherwise
    # meet stale rank addresses in the shared store and never converge.
    env = {"PET_MONITOR_INTERVAL": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **env}
    worker = {
        "replicas": 3,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [{
            "name": "pytorch", "image": "unused-locally",
            "command": ["torchrun", "--module", "kftrain.programs.torch_ddp"], "args": args,
            "env": [{"name": k, "value": v} for k, v in env.items()],
        }]}},
    }  # fmt: skip
    return load_manifest(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {
                # One process per replica (the operator would default nprocPerNode to auto: one per core).
                "nprocPerNode": "1",
                "elasticPolicy": {
                    "minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 10,
                    "rdzvConf": [{"key": "last_call_timeout", "value": "1"}],
                },
                "pytorchReplicaSpecs": {"Worker": worker},
            },
        }
    )  # fmt: skip


def plans(log: str) -> dict[int, tuple[int, int, int, float]]:
    """World size -> (global batch, accumulation, micro-batch, lr), from the trainer's plan lines."""
    found: dict[int, tuple[int, int, int, float]] = {}
    for world, glob, accum, micro, lr in re.findall(
        r"world size (\d+): global batch (\d+) = \d+ process\(es\) x (\d+) micro-batch\(es\) of (\d+); "
        r"lr (\S+) for the global batch",
        log,
    ):
        plan = (int(glob), int(accum), int(micro), float(lr))
        assert found.setdefault(int(world), plan) == plan, (world, plan, found[int(world)])
    return found


def rows_by_step(log: str) -> dict[int, tuple[int, list[int]]]:
    """Step -> (epoch, the rows of its last execution), from the ``--log-samples`` lines.

    A step can run more than once (after a resume from an older checkpoint); its last execution is the one
    the final model carries: the last ``world`` lines of that step, one per rank, at that world size.
    """
    lines = re.findall(r"samples step (\d+) epoch (\d+) batch \d+ world (\d+) rank (\d+) rows ([\d,]+)", log)
    by_step: dict[int, list[tuple[int, int, int, list[int]]]] = defaultdict(list)
    for step, epoch, world, rank, rows in lines:
        by_step[int(step)].append((int(epoch), int(world), int(rank), [int(r) for r in rows.split(",")]))
    out = {}
    for step, entries in by_step.items():
        epoch, world = entries[-1][0], entries[-1][1]
        last: dict[int, list[int]] = {}
        for _epoch, e_world, rank, rows in reversed(entries):
            if e_world != world or len(last) == world:
                break
            last.setdefault(rank, rows)
        assert sorted(last) == list(range(world)), (step, world, sorted(last))
        out[step] = (epoch, [r for rank in sorted(last) for r in last[rank]])
    return out


def test_elastic_pytorchjob_shrinks_and_grows_with_the_same_global_batch(dataset, tmp_path):
    # The uninterrupted run: 3 workers from start to end, the same global batch and seed.
    baseline_out, baseline_log = tmp_path / "baseline", Log()
    result = LocalBackend(LocalConfig(out=baseline_log, grace_period_s=2)).run(
        elastic_job("baseline", dataset, baseline_out, {}), timeout=400
    )
    assert result.succeeded, result.describe() + baseline_log.getvalue()[-3000:]

    hold = tmp_path / "hold"
    hold.write_text("60")  # no process starts step 61 until the file says so
    out, log = tmp_path / "elastic", Log()
    job = elastic_job("elastic", dataset, out, {"KFTRAIN_HOLD_FILE": str(hold)})
    with held_run(job, log, hold) as (backend, handle, results):
        pos = log.wait_for(r"rank 0/3: ")
        log.wait_for(r"rank 0 holding after step 60 ", pos)
        log.wait_for(r"checkpoint complete at step 60: ", pos)
        backend.kill_replica(handle, "worker-2")  # the node is lost: its agent and its worker
        pos = log.wait_for(r"worker-2 exited with code \d+; the elastic job goes on with 2 worker", pos)
        hold.write_text("120")
        # The survivors fail at their next allreduce; their agents re-form the group at 2, from step 60.
        pos = log.wait_for(r"resumed from checkpoint \S+ at step 60 ", pos)
        pos = log.wait_for(r"rank 0/2: ", pos)
        log.wait_for(r"rank 0 holding after step 120 ", pos)
        log.wait_for(r"checkpoint complete at step 120: ", pos)
        backend.scale(handle, "Worker", 3)  # as `kubectl scale`: a new worker joins at the next rendezvous
        pos = log.wait_for(r"scaled Worker up: starting worker-3", pos)
        pos = log.wait_for(r"rank 0/3: ", pos)
        log.wait_for(r"rank 0 holding after step 120 ", pos)
    text = succeeded(results, log, tail=3000)

    # The same global batch and learning rate at every size; only micro-batches and accumulation change.
    assert plans(text) == {3: (48, 2, 8, LR), 2: (48, 3, 8, LR)}
    assert plans(baseline_log.getvalue()) == {3: (48, 2, 8, LR)}

    # Every step trained on exactly the rows the uninterrupted run's did, and within each epoch no row twice.
    elastic, baseline = rows_by_step(text), rows_by_step(baseline_log.getvalue())
    assert sorted(elastic) == sorted(baseline) == list(range(1, max(baseline) + 1))
    for step, (epoch, rows) in elastic.items():
        assert (epoch, sorted(rows)) == (baseline[step][0], sorted(baseline[step][1])), step
    per_epoch: dict[int, list[int]] = defaultdict(list)
    for epoch, rows in elastic.values():
        per_epoch[epoch] += rows
    steps_per_epoch = len(baseline) // EPOCHS
    for epoch, rows in per_epoch.items():
        assert len(rows) == len(set(rows)) == steps_per_epoch * GLOBAL_BATCH, epoch
    interrupted = elastic[61][0]  # the epoch the loss happened in, resumed in the middle
    assert elastic[60][0] == interrupted, "step 60 should be inside an epoch"

    # The same model, up to the order of float sums: each micro-batch draws the same dropout masks at any size
    # (GlobalOrder.micro_batch_seeds). Without that, the runs trained with other noise after the resize, and
    # their accuracies were 2 points apart on one machine.
    got = evaluate_model(str(out / "model"), dataset).metrics
    expected = evaluate_model(str(baseline_out / "model"), dataset).metrics
    assert abs(got["log_loss"] - expected["log_loss"]) <= 1e-3 * expected["log_loss"], (got, expected)
    assert abs(got["accuracy"] - expected["accuracy"]) <= 0.01, (got, expected)


def test_the_launch_component_runs_an_elastic_job_under_torchrun_one_process_per_worker(dataset, tmp_path, capfd):
    """The typed path, through the component's own function on the local backend."""
    model = SimpleNamespace(uri=str(tmp_path / "model"), metadata={})
    pytorchjob_launch.python_func(
        dataset_uri=dataset,
        model=model,
        job=str(tmp_path / "job"),
        **kfp_outputs(tmp_path),
        workers=2,
        elastic_min_workers=1,
        elastic_max_workers=3,
        elastic_rdzv_conf={"last_call_timeout": "1"},
        args=["--epochs", 3.0, "--global-batch-size", 48.0, "--batch-size", 8.0],
        checkpoint_uri=str(tmp_path / "ckpt"),
        backend="local",
        run_id="run-1",
        task_id="task-1",
    )
    out = capfd.readouterr().out
    # Two replicas, one process each (the operator's default, auto, would start one per core here).
    assert plans(out) == {2: (48, 3, 8, 0.1)}, out[-3000:]
    assert "[worker-0]" in out and "[worker-1]" in out and "[master-0]" not in out
    assert evaluate_model(model.uri, dataset).metrics["accuracy"] >= 0.8


def horovod_elastic_manifest(name: str, trainer_args: list[str], env: dict[str, str]) -> dict:
    """The shape of the training-operator's examples/mpi/tensorflow-mnist-elastic.yaml (v1 MPIJob,
    spec.cleanPodPolicy, mpi-launcher/mpi-worker containers, horovodrun with the operator's host-discovery
    script) with this release's Horovod trainer as its program."""
    image = "horovod/horovod:0.28.1-tf2.21-torch2.13-py3.11-cpu"
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "cleanPodPolicy": "Running",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{
                    "image": image, "name": "mpi-launcher", "command": ["horovodrun"],
                    "args": ["-np", "2", "--min-np", "1", "--max-np", "3",
                             "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
                             "python", "-m", "kftrain.programs.horovod_torch", *trainer_args],
                    "resources": {"limits": {"cpu": 1, "memory": "2Gi"}},
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                }]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [{
                    "image": image, "name": "mpi-worker", "resources": {"limits": {"cpu": 2, "memory": "4Gi"}},
                }]}}},
            },
        },
    }  # fmt: skip


@pytest.fixture(scope="session")
def horovod_gloo() -> None:
    """Probed when the test runs (a subprocess that imports PyTorch), not at collection."""
    if not needs.horovod_gloo():
        pytest.skip("Horovod with PyTorch and Gloo not installed (scripts/build_horovod.sh)")


def test_horovod_elastic_mpijob_loses_a_worker_and_admits_a_new_one(horovod_gloo, dataset, tmp_path, crd_schemas):
    hold = tmp_path / "hold"
    hold.write_text("40")
    args = [
        "--dataset", dataset, "--model-dir", str(tmp_path / "model"), "--checkpoint-dir", str(tmp_path / "ckpt"),
        "--epochs", "6", "--global-batch-size", str(GLOBAL_BATCH), "--batch-size", str(MICRO_BATCH),
        "--lr", str(LR), "--seed", "1", "--checkpoint-every-steps", "20",
    ]  # fmt: skip
    manifest = horovod_elastic_manifest("hvd-elastic", args, {"KFTRAIN_HOLD_FILE": str(hold)})
    assert crd_schemas.errors(manifest) == []  # what the API server accepts
    job = load_manifest(manifest)  # and what the operator's webhook and this package accept
    log = Log()
    with held_run(job, log, hold) as (backend, handle, results):
        pos = log.wait_for(r"rank 0/2: ")
        log.wait_for(r"rank 0 committed state at step 40$", pos)
        pos = log.wait_for(r"rank 0 holding after step 40 ", pos)
        # The worker's pod is lost: it leaves discover_hosts.sh, its rank is killed. The survivor restores its
        # last committed state (step 40) and goes on alone.
        backend.kill_replica(handle, "worker-1")
        pos = log.wait_for(r"lost worker-1 \(host 127\.0\.0\.01\): signalled 1 rank", pos)
        # horovodrun tells only rank 0 of changed hosts, and the survivor may not be rank 0: let it go on to its
        # next collective, which fails on the lost peer.
        hold.write_text("80")
        pos = log.wait_for(r"rank 0/1: .* at step 40 ", pos)
        pos = log.wait_for(r"rank 0 holding after step 80 ", pos)
        # A new worker (as `kubectl scale` adds one): listed by discover_hosts.sh, horovodrun starts a rank on it;
        # the one rank, told of the new host, meets it before its next step.
        backend.scale(handle, "Worker", 2)
        pos = log.wait_for(r"scaled Worker up: worker-2 hosts ranks", pos)
        pos = log.wait_for(r"rank 0/2: .* at step 80 ", pos)
        log.wait_for(r"rank 0 holding after step 80 ", pos)
    text = succeeded(results, log, tail=4000)
    assert plans(text) == {2: (48, 3, 8, LR), 1: (48, 6, 8, LR)}
    assert evaluate_model(str(tmp_path / "model"), dataset).metrics["accuracy"] >= 0.9

"""Fault tolerance through the local backend: crash-resume from checkpoints, crash loops, elastic membership."""

from __future__ import annotations

import io
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from kftrain.backends import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from kftrain.steps.evaluate import evaluate_model
from kftrain.steps.export import export_model
from kftrain.steps.prep import prepare_dataset

pytestmark = pytest.mark.slow

TRAINER = ["python", "-m", "kftrain.trainers.torch_ddp"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("data") / "digits")
    prepare_dataset(uri)
    return uri


def _replica(command: list[str], args: list[str], env: dict[str, str], restart: str) -> dict:
    return {
        "replicas": 1,
        "restartPolicy": restart,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "unused-locally",
                        "command": command,
                        "args": args,
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                    }
                ]
            }
        },
    }


def ddp_job(name: str, args: list[str], env: dict[str, str], *, backoff: int = 4, restart: str = "OnFailure"):
    return load_manifest(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {
                "runPolicy": {"backoffLimit": backoff},
                "pytorchReplicaSpecs": {
                    "Master": _replica(TRAINER, args, env, restart),
                    "Worker": _replica(TRAINER, args, env, restart),
                },
            },
        }
    )


def trainer_args(dataset: str, out: Path, epochs: int = 10) -> list[str]:
    return [
        "--dataset", dataset, "--model-dir", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
        "--epochs", str(epochs), "--checkpoint-every-steps", "20", "--checkpoint-every-epochs", "0",
    ]  # fmt: skip


def run(job, timeout: float = 240) -> tuple:
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(out=out, grace_period_s=2))
    result = backend.run(job, timeout=timeout)
    return result, out.getvalue()


def test_killed_worker_restarts_and_resumes_from_the_last_checkpoint(dataset, tmp_path):
    baseline_dir, crash_dir = tmp_path / "baseline", tmp_path / "crash"
    baseline, _ = run(ddp_job("baseline", trainer_args(dataset, baseline_dir), {}))
    assert baseline.succeeded, baseline.describe()

    fault = {"KFTRAIN_FAULT_AT_STEP": "50", "KFTRAIN_FAULT_RANK": "1", "KFTRAIN_FAULT_MARKER": str(tmp_path / "m")}
    result, log = run(ddp_job("crash", trainer_args(dataset, crash_dir), fault))
    assert result.succeeded, result.describe() + log[-3000:]
    assert (tmp_path / "m").read_text() == "killed at step 50\n"
    assert re.search(r"\[worker-0\] .*exited with code 137|worker-0 exited with code 137", log), log[-3000:]
    resumed = [int(s) for s in re.findall(r"resumed from checkpoint \S+ at step (\d+)", log)]
    assert resumed and all(40 <= s <= 50 for s in resumed), resumed  # checkpoints every 20 steps: 40 is the last
    accuracy = evaluate_model(str(crash_dir / "model"), dataset).metrics["accuracy"]
    expected = evaluate_model(str(baseline_dir / "model"), dataset).metrics["accuracy"]
    assert abs(accuracy - expected) <= 0.02, (accuracy, expected)
    # The resumed model goes through the same export (reloaded and compared) as any other.
    report = export_model(str(crash_dir / "model"), dataset, str(crash_dir / "export"))
    assert [e.format for e in report.exports] == ["torchscript", "onnx"]


def test_a_crash_loop_ends_as_failed_after_backoff_limit(dataset, tmp_path):
    fault = {"KFTRAIN_FAULT_AT_STEP": "30", "KFTRAIN_FAULT_RANK": "1"}  # no marker: every attempt dies
    result, log = run(ddp_job("loop", trainer_args(dataset, tmp_path), fault, backoff=2))
    assert not result.succeeded
    assert result.reason == "BackoffLimitExceeded", result.describe()
    assert result.exit_code in (137, 1)  # the killed worker, or the master that lost its peer
    assert log.count("restart ") == 2, log[-3000:]


def _wait_for(log: io.StringIO, pattern: str, after: int = 0, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.getvalue()
        match = re.search(pattern, text[after:])
        if match:
            return after + match.end()
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {pattern!r}; log tail:\n{log.getvalue()[-4000:]}")


@pytest.mark.skipif(not Path(sys.executable).with_name("torchrun").exists(), reason="torchrun not installed")
def test_elastic_job_survives_a_lost_worker_and_admits_a_new_one(dataset, tmp_path):
    # Long enough (~20 s at 2 workers) to re-form the group at 2 and then admit a third worker.
    args = [*trainer_args(dataset, tmp_path, epochs=400), "--checkpoint-every-steps", "50"]
    # One process per replica: without nProcPerNode the operator defaults nprocPerNode to "auto", and torchrun
    # then starts one process per CPU core. A fresh worker store per rendezvous round: agents whose restart
    # counts diverged after the loss otherwise meet stale rank addresses in the shared store and never converge.
    env = {"PET_MONITOR_INTERVAL": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    worker = _replica(["torchrun", "--module", "kftrain.trainers.torch_ddp"], args, env, "Never")
    worker["replicas"] = 3
    job = load_manifest(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "elastic"},
            "spec": {
                "elasticPolicy": {
                    "minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 10, "nProcPerNode": 1,
                    "rdzvConf": [{"key": "last_call_timeout", "value": "1"}],
                },
                "pytorchReplicaSpecs": {"Worker": worker},
            },
        }
    )  # fmt: skip
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(out=out, grace_period_s=2))
    handle = backend.submit(job)
    results: list = []
    waiter = threading.Thread(target=lambda: results.append(backend.wait(handle, timeout=400)))
    waiter.start()
    try:
        pos = _wait_for(out, r"rank 0/3: ")
        # Kill only once a checkpoint is complete: before that the survivors re-form the group and
        # start from scratch, and there is nothing to resume from.
        pos = _wait_for(out, r"checkpoint complete at step (\d+)", pos)
        backend.kill_replica(handle, "worker-2")
        pos = _wait_for(out, r"elastic job goes on with 2 worker", pos)
        # The survivors' agents restart their workers and re-form the group at 2, from the checkpoint.
        pos = _wait_for(out, r"resumed from checkpoint \S+ at step \d+", pos, timeout=240)
        pos = _wait_for(out, r"rank 0/2: ", pos - 200, timeout=60)
        backend.scale(handle, "Worker", 3)  # as `kubectl scale`: a new worker joins at the next rendezvous
        pos = _wait_for(out, r"starting worker-3", pos)
        _wait_for(out, r"rank 0/3: ", pos, timeout=240)
    finally:
        waiter.join(timeout=420)
        backend.cancel(handle)
    summary = results[0].describe() if results else "no result"
    assert results and results[0].succeeded, summary + out.getvalue()[-3000:]


def test_killed_horovod_rank_restarts_the_mpijob_which_resumes(dataset, tmp_path):
    """MPIJob: a rank dies, mpirun takes the launcher down, OnFailure restarts it, training resumes."""
    pytest.importorskip("horovod.torch")
    if not Path(sys.executable).with_name("mpirun").exists() and not shutil.which("mpirun"):
        pytest.skip("mpirun missing (scripts/install_mpi.sh)")
    command = ["mpirun", "-n", "2", "python", "-m", "kftrain.trainers.horovod_torch"]
    args = [*trainer_args(dataset, tmp_path, epochs=6), "--seed", "1"]
    fault = {"KFTRAIN_FAULT_AT_STEP": "45", "KFTRAIN_FAULT_RANK": "1", "KFTRAIN_FAULT_MARKER": str(tmp_path / "m")}
    launcher = _replica(command, args, fault, "OnFailure")
    launcher["template"]["spec"]["containers"][0]["name"] = "mpi"
    worker = {"replicas": 2, "template": {"spec": {"containers": [{"name": "mpi", "image": "unused-locally"}]}}}
    job = load_manifest(
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "hvd-crash"},
            "spec": {
                "slotsPerWorker": 1,
                "runPolicy": {"backoffLimit": 3},
                "mpiReplicaSpecs": {"Launcher": launcher, "Worker": worker},
            },
        }
    )
    result, log = run(job)
    assert result.succeeded, result.describe() + log[-3000:]
    assert (tmp_path / "m").read_text() == "killed at step 45\n"
    assert "launcher-0 exited with code" in log and "restart 1/3" in log, log[-3000:]
    resumed = [int(s) for s in re.findall(r"resumed from checkpoint \S+ at step (\d+)", log)]
    assert resumed and all(40 <= s < 45 for s in resumed), resumed  # checkpoints every 20 steps
    assert evaluate_model(str(tmp_path / "model"), dataset).metrics["accuracy"] >= 0.90


def test_killed_tf_worker_restarts_the_tfjob_which_resumes(dataset, tmp_path):
    """TFJob (MultiWorkerMirrored): a worker dies, its peer fails on the lost connection, both restart
    under OnFailure and resume from the BackupAndRestore checkpoint."""
    pytest.importorskip("tf_keras")
    command = ["python", "-m", "kftrain.trainers.tf_trainer"]
    args = ["--dataset", dataset, "--model-dir", str(tmp_path / "model"), "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--epochs", "6", "--checkpoint-every-steps", "20"]  # fmt: skip
    fault = {"KFTRAIN_FAULT_AT_STEP": "45", "KFTRAIN_FAULT_RANK": "1", "KFTRAIN_FAULT_MARKER": str(tmp_path / "m")}
    worker = _replica(command, args, fault, "OnFailure")
    worker["replicas"] = 2
    worker["template"]["spec"]["containers"][0]["name"] = "tensorflow"
    job = load_manifest(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "tf-crash"},
            "spec": {"runPolicy": {"backoffLimit": 4}, "tfReplicaSpecs": {"Worker": worker}},
        }
    )
    result, log = run(job)
    assert result.succeeded, result.describe() + log[-3000:]
    assert (tmp_path / "m").read_text() == "killed at step 45\n"
    assert "worker-1 exited with code 137" in log, log[-3000:]
    resumed = [int(s) for s in re.findall(r"resumed from checkpoint at step (\d+)", log)]
    assert resumed and all(40 <= s < 45 for s in resumed), resumed
    assert evaluate_model(str(tmp_path / "model"), dataset).metrics["accuracy"] >= 0.90

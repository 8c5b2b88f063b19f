"""Fault tolerance through the local backend: crash-resume from checkpoints and crash loops (elastic jobs that
shrink and grow: tests/backends/local/test_elastic.py)."""

from __future__ import annotations

import io
import re
import shutil
import sys
from pathlib import Path

import pytest

from kftrain.backends import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from kftrain.steps.evaluate import evaluate_model
from kftrain.steps.export import export_model
from kftrain.steps.prep import prepare_dataset
from testbed.needs import require

pytestmark = pytest.mark.slow

TRAINER = ["python", "-m", "kftrain.programs.torch_ddp"]


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


def resumed_from_complete(log: str) -> list[int]:
    """The steps each restart resumed at, each checked to be a checkpoint logged complete before it.

    Checkpoints upload in the background: the newest complete one when a replica dies may be older than the
    last one started, and a resume must pick a complete one.
    """
    resumed = []
    for match in re.finditer(r"resumed from checkpoint \S+ at step (\d+)", log):
        complete = {int(s) for s in re.findall(r"checkpoint complete at step (\d+)", log[: match.start()])}
        assert int(match.group(1)) in complete, (match.group(0), sorted(complete))
        resumed.append(int(match.group(1)))
    return resumed


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
    resumed = resumed_from_complete(log)
    assert resumed and all(20 <= s <= 50 for s in resumed), resumed  # checkpoints every 20 steps
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
    # The first failure (the killed worker, or the master that lost it) is restarted; the second would make the
    # job's pods' restarts 2, which is backoffLimit: the job fails instead (kftrain.job.kinds.base.Backoff.spent).
    assert log.count("restart ") == 1, log[-3000:]


def test_killed_horovod_rank_restarts_the_mpijob_which_resumes(dataset, tmp_path):
    """MPIJob: a rank dies, mpirun takes the launcher down, OnFailure restarts it, training resumes."""
    require("horovod.torch")
    if not Path(sys.executable).with_name("mpirun").exists() and not shutil.which("mpirun"):
        pytest.skip("mpirun missing (scripts/install_mpi.sh)")
    command = ["mpirun", "-n", "2", "python", "-m", "kftrain.programs.horovod_torch"]
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
    resumed = resumed_from_complete(log)
    assert resumed and all(20 <= s < 45 for s in resumed), resumed  # every 20 steps and every epoch (22 steps)
    assert evaluate_model(str(tmp_path / "model"), dataset).metrics["accuracy"] >= 0.90


def test_killed_tf_worker_restarts_the_tfjob_which_resumes(dataset, tmp_path):
    """TFJob (MultiWorkerMirrored): a worker dies, its peer fails on the lost connection, both restart
    under OnFailure and resume from the BackupAndRestore checkpoint."""
    require("tf_keras")
    command = ["python", "-m", "kftrain.programs.tf_distributed"]
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

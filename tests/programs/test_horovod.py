"""Horovod through MPIJobs on the local backend: an allreduce across 2 ranks, and the PyTorch and Keras trainers
(2 ranks, checkpoints, resume), each started by a plain ``mpirun -n 2`` in the Launcher."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kftrain.data.dataset import load_split
from kftrain.steps.prep import prepare_dataset
from testbed.launch_harness import launch_locally
from testbed.manifests import mpijob_v1, mpijob_v2, replica
from testbed.needs import require

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)"),
    pytest.mark.usefixtures("horovod_torch"),
]


def launch(
    tmp_path: Path, command: list[str], *, version: str = "v2beta1", timeout: int = 300, env: dict | None = None
):
    build = mpijob_v2 if version == "v2beta1" else mpijob_v1
    manifest = build(
        {"Launcher": replica(1, "mpi", command=command, restart_policy="Never"), "Worker": replica(2, "mpi")},
        name="hvd-test",
        slotsPerWorker=1,
    )
    return launch_locally(manifest, tmp_path, job_timeout=timeout - 20, timeout=timeout, env=env)


def two_rank_trainer(module: str, dataset: str, ckpt_dir: Path, *flags: str) -> list[str]:
    """``mpirun -n 2`` of a trainer module, checkpointing into ``ckpt_dir``."""
    mpirun = ["mpirun", "-n", "2", "python", "-m", module]
    return [*mpirun, "--dataset", dataset, "--checkpoint-dir", str(ckpt_dir), *flags]


def train(tmp_path: Path, trainer: list[str], model_dir: Path, epochs: int) -> str:
    """The output of ``trainer`` run to ``epochs`` into ``model_dir``, once it succeeded."""
    proc = launch(tmp_path, [*trainer, "--model-dir", str(model_dir), "--epochs", str(epochs)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("data") / "digits")
    prepare_dataset(uri, seed=42)
    return uri


@pytest.mark.parametrize("version", ["v2beta1", "v1"])
def test_horovod_allreduce_across_two_ranks(tmp_path, version):
    proc = launch(tmp_path, ["mpirun", "-n", "2", "python", "examples/mpi/hvd_allreduce.py"], version=version)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        assert f"[launcher-0] horovod rank {rank} of 2: allreduce sum 3 (expected 3)" in proc.stdout


@pytest.mark.usefixtures("horovod_tf")
def test_a_horovod_tf2_keras_program_of_the_users_runs_in_the_shipped_environment(tmp_path):
    """A program written as Horovod's own TF2 examples are (tf.keras, hvd.DistributedOptimizer, the broadcast and
    metric-average callbacks), knowing nothing of Keras 2 or 3, runs on 2 ranks: the environment makes tf.keras
    Keras 2 (TF_USE_LEGACY_KERAS=1 from the venv's .pth, as the image's ENV does) and Horovod's Keras callbacks use
    tf.keras's backend (scripts/build_horovod.sh). Nothing here sets the variable; with it set to 0 the program
    fails, as it does anywhere Keras 3 is tf.keras."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    command = ["mpirun", "-n", "2", "python", "examples/mpi/hvd_tf2_keras.py"]
    proc = launch(tmp_path, command, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        assert f"[launcher-0] hvd tf2 keras rank {rank} of 2: keras tf_keras" in proc.stdout, proc.stdout[-3000:]
    assert proc.stdout.count("in sync True") == 2

    keras3 = launch(tmp_path, command, env={**env, "TF_USE_LEGACY_KERAS": "0"})
    assert keras3.returncode != 0, "the program ran under Keras 3: the test would not notice a missing setting"


def test_horovod_torch_trains_checkpoints_and_resumes(tmp_path, dataset):
    model_dir, ckpt_dir = tmp_path / "model", tmp_path / "ckpt"
    flags = ("--checkpoint-every-steps", "7", "--seed", "1")
    trainer = two_rank_trainer("kftrain.programs.horovod_torch", dataset, ckpt_dir, *flags)
    first = train(tmp_path, trainer, model_dir / "a", epochs=3)
    assert "rank 0/2" in first and "rank 1/2" in first
    assert "checkpoint complete at step 7: " in first
    steps = sorted(int(p.name.split("-")[1]) for p in ckpt_dir.iterdir() if p.name.startswith("ckpt-"))
    assert steps and len(steps) <= 3  # pruned to the newest 3

    second = train(tmp_path, trainer, model_dir / "b", epochs=8)
    resumed = f"resumed from checkpoint {ckpt_dir}/ckpt-{steps[-1]:010d} at step {steps[-1]} (epoch 3, 0 global"
    assert resumed in second
    assert "epoch 4/8" in second and "epoch 1/8" not in second

    import torch

    from kftrain.models.pytorch import load_model

    model, info = load_model(str(model_dir / "b"))
    assert info["framework"] == "pytorch" and info["metrics"]["ranks"] == 2
    x, y = load_split(dataset, "test")
    with torch.no_grad():
        acc = float((model(torch.from_numpy(x)).argmax(dim=1).numpy() == y).mean())
    assert acc >= 0.9


@pytest.mark.usefixtures("horovod_tf")
def test_horovod_keras_trains_checkpoints_and_resumes(tmp_path, dataset):
    require("tf_keras", reason="the Horovod Keras trainer uses Keras 2")
    model_dir, ckpt_dir = tmp_path / "model", tmp_path / "ckpt"
    trainer = two_rank_trainer(
        "kftrain.programs.horovod_tf", dataset, ckpt_dir, "--checkpoint-every-steps", "5", "--lr", "0.05"
    )
    first = train(tmp_path, trainer, model_dir / "a", epochs=2)
    assert "rank 0/2" in first and "rank 1/2" in first
    assert "checkpoint at step 5" in first
    second = train(tmp_path, trainer, model_dir / "b", epochs=10)
    assert "resumed from checkpoint" in second and "(epoch 2)" in second

    from kftrain.models import load_predictor

    predict, info = load_predictor(str(model_dir / "b"))
    assert info["framework"] == "tensorflow" and info["strategy"] == "horovod"
    x, y = load_split(dataset, "test")
    acc = float((np.asarray(predict(x)).argmax(axis=1) == y).mean())
    assert acc >= 0.85

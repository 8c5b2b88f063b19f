"""trainer_args turns a pipeline's typed training parameters into the flags of this release's trainers at run time;
a zero (or -1 for the seed) leaves the trainer's own default."""

from __future__ import annotations

from kftrain_components.training.trainer_args.component import trainer_args


def test_every_value_set_becomes_its_flag_and_extra_comes_last():
    flags = trainer_args.python_func(
        epochs=20,
        global_batch_size=64,
        batch_size=16,
        learning_rate=0.05,
        seed=7,
        checkpoint_every_steps=100,
        extra=["--hidden", "64"],
    )
    assert flags == [
        "--epochs", "20", "--global-batch-size", "64", "--batch-size", "16", "--lr", "0.05", "--seed", "7",
        "--checkpoint-every-steps", "100", "--hidden", "64",
    ]  # fmt: skip


def test_the_defaults_leave_every_trainer_default():
    assert trainer_args.python_func() == []
    assert trainer_args.python_func(seed=0) == ["--seed", "0"]  # 0 is a seed; only -1 leaves it out


def test_a_local_run_outputs_the_flags(kfp_local):
    """KFP's local runner passes the typed values and returns the list, as a pipeline hands it to a launch step."""
    assert trainer_args(epochs=3, learning_rate=0.1, extra=["--x"]).output == ["--epochs", "3", "--lr", "0.1", "--x"]

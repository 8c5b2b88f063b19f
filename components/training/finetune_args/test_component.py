"""finetune_args turns a pipeline's typed fine-tuning parameters into the flags of kftrain.programs.hf_finetune at
run time; an empty or zero value (-1 for the seed) leaves the program's own default."""

from __future__ import annotations

from kftrain.launch.component import PROGRAM_FLAGS
from kftrain_components.training.finetune_args.component import finetune_args


def test_every_value_set_becomes_its_flag_and_the_program_parses_them():
    flags = finetune_args.python_func(
        model_uri="s3://models/base", method="full", max_length=128, lora_r=4, epochs=3, global_batch_size=16,
        batch_size=8, learning_rate=0.0002, seed=7, checkpoint_every_steps=50,
        extra=["--dataset", "d", "--model-dir", "m"],  # a later flag wins: as a user's extra would
    )  # fmt: skip
    assert flags == [
        *PROGRAM_FLAGS,
        "--epochs", "3", "--global-batch-size", "16", "--batch-size", "8", "--lr", "0.0002", "--seed", "7",
        "--checkpoint-every-steps", "50", "--model-uri", "s3://models/base", "--method", "full", "--max-length", "128",
        "--lora-r", "4", "--dataset", "d", "--model-dir", "m",
    ]  # fmt: skip
    from kftrain.programs.hf_finetune import parse_args

    parsed = parse_args(flags)
    assert (parsed.model_uri, parsed.method, parsed.max_length, parsed.lora_r, parsed.epochs) == (
        "s3://models/base", "full", 128, 4, 3
    )  # fmt: skip


def test_the_defaults_leave_every_program_default_and_give_the_uris():
    """The URIs as the launch step gives this release's programs, $(VAR) references it expands in every replica."""
    assert finetune_args.python_func() == list(PROGRAM_FLAGS)
    assert PROGRAM_FLAGS[:2] == ("--dataset", "$(KFTRAIN_DATASET_URI)")


def test_a_local_run_outputs_the_flags(kfp_local):
    """KFP's local runner passes the typed values and returns the list, as a pipeline hands it to a launch step."""
    flags = ["--epochs", "2", "--method", "lora", "--x"]
    assert finetune_args(method="lora", epochs=2, extra=["--x"]).output == [*PROGRAM_FLAGS, *flags]

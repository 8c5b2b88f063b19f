"""KFP component: the command line of this release's fine-tuning program, built at run time from typed values."""

from kfp import dsl

from kftrain_components.images import LAUNCH_IMAGE


@dsl.component(base_image=LAUNCH_IMAGE, install_kfp_package=False)
def finetune_args(
    model_uri: str = "",
    method: str = "",
    max_length: int = 0,
    lora_r: int = 0,
    epochs: int = 0,
    global_batch_size: int = 0,
    batch_size: int = 0,
    learning_rate: float = 0.0,
    seed: int = -1,
    checkpoint_every_steps: int = 0,
    extra: list = [],
) -> list:
    """The arguments of `python -m kftrain.programs.hf_finetune`, for a launch step's `args`: the URIs' flags the launch
    gives this release's programs (`--dataset $(KFTRAIN_DATASET_URI)`, `--model-dir`, `--checkpoint-dir`), the flags
    every trainer takes (as trainer_args writes them), the fine-tuning ones (`--model-uri ... --method full`), then
    `extra`. A pipeline's parameters reach a list only through a step's inputs, so it is built here, at run time. An
    empty or zero value (-1 for the seed) leaves the program's own default.

    Args:
        model_uri: --model-uri, the base model (a Hugging Face folder, s3:// prefix, /workspace/model); empty: the
            embedded tiny Llama, made at run time from the training texts.
        method: --method, lora or full (empty: the program's default, lora).
        max_length: --max-length, tokens of prompt + response (0: the program's default).
        lora_r: --lora-r, the rank of the LoRA adapters (0: the program's default).
        epochs: --epochs (0: the program's default).
        global_batch_size: --global-batch-size, examples per optimizer step across all processes, kept at every
            world size (0: --batch-size x the processes).
        batch_size: --batch-size, the most examples a process computes at once (0: the program's default).
        learning_rate: --lr (0: the program's default).
        seed: --seed (-1: the program's default).
        checkpoint_every_steps: --checkpoint-every-steps (0: the program's default).
        extra: Further arguments, appended as they are.
    """
    from kftrain.launch.component import PROGRAM_FLAGS
    from kftrain.programs.common import trainer_flags

    own = {"--model-uri": model_uri, "--method": method, "--max-length": max_length, "--lora-r": lora_r}
    flags = [part for flag, value in own.items() if value for part in (flag, str(value))]
    common = trainer_flags(
        epochs=epochs,
        global_batch_size=global_batch_size,
        batch_size=batch_size,
        lr=learning_rate,
        seed=seed,
        checkpoint_every_steps=checkpoint_every_steps,
        extra=[*flags, *extra],
    )
    return [*PROGRAM_FLAGS, *common]

"""KFP component: the command-line flags of this release's trainers, built at run time from typed pipeline values."""

from kfp import dsl

from kftrain_components.images import LAUNCH_IMAGE


@dsl.component(base_image=LAUNCH_IMAGE, install_kfp_package=False)
def trainer_args(
    epochs: int = 0,
    global_batch_size: int = 0,
    batch_size: int = 0,
    learning_rate: float = 0.0,
    seed: int = -1,
    checkpoint_every_steps: int = 0,
    extra: list = [],
) -> list:
    """The flags of kftrain's trainers (`--epochs 20 --global-batch-size 64 ...`), for a launch step's `args`.

    A pipeline passes each of its parameters here as its own input and the resulting list on to the launch
    step: KFP's backend fills pipeline parameters into a task's inputs, never into a list or dict written
    in the pipeline, so the list is built here, at run time. A zero (or -1 for the seed) leaves the
    trainer's own default.

    Args:
        epochs: --epochs (0: the trainer's default).
        global_batch_size: --global-batch-size, rows per optimizer step across all processes, kept at every
            world size (0: --batch-size x the processes).
        batch_size: --batch-size, the most rows a process computes at once (0: the trainer's default).
        learning_rate: --lr (0: the trainer's default).
        seed: --seed (-1: the trainer's default).
        checkpoint_every_steps: --checkpoint-every-steps (0: the trainer's default).
        extra: Further arguments, appended as they are.
    """
    from kftrain.programs.common import trainer_flags

    return trainer_flags(
        epochs=epochs,
        global_batch_size=global_batch_size,
        batch_size=batch_size,
        lr=learning_rate,
        seed=seed,
        checkpoint_every_steps=checkpoint_every_steps,
        extra=extra,
    )

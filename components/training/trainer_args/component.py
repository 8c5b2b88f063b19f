"""The flags of kftrain's trainers (`--epochs 20 --global-batch-size 64 ...`), for a launch step's `args`.

A pipeline passes each of its parameters here as its own input and the resulting list on to the launch
step: KFP's backend fills pipeline parameters into a task's inputs, never into a list or dict written
in the pipeline, so the list is built here, at run time. A zero (or -1 for the seed) leaves the
trainer's own default.
"""

from kftrain_components.training.trainer_flags import flags_component, trainer_flags_call

trainer_args = flags_component(
    __name__, [], f"from kftrain.programs.common import trainer_flags\n\nreturn {trainer_flags_call()}\n"
)

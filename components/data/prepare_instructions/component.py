"""Prepare instruction data: train/test JSON Lines of {prompt, response} examples, checked, deduplicated, split.

Every input problem (malformed JSON, a missing field, an empty or over-long example, a chat that does not end with
the assistant's turn...) fails the step with a message naming the field, the file and the line, before anything
is written; with invalid=drop, empty and over-long examples are dropped and counted instead.
"""

from kftrain.inputs.prep_instructions import OUTPUTS, PrepareInstructionsInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import DATA_IMAGE

prepare_instructions = step_component(
    __name__,
    PrepareInstructionsInputs,
    "kftrain.steps.prep_instructions.component:prepare_instructions_component",
    outputs=OUTPUTS,
    image=DATA_IMAGE,
)

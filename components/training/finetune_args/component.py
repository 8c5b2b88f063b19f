"""The arguments of `python -m kftrain.programs.hf_finetune`, for a launch step's `args`.

The URIs' flags the launch gives this release's programs (`--dataset $(KFTRAIN_DATASET_URI)`, `--model-dir`,
`--checkpoint-dir`), the flags every trainer takes (as trainer_args writes them), the fine-tuning ones
(`--model-uri ... --method full`), then `extra`. A pipeline's parameters reach a list only through a step's inputs,
so it is built here, at run time. An empty or zero value (-1 for the seed) leaves the program's own default.
"""

from kftrain.inputs import Parameter
from kftrain_components.training.trainer_flags import flags_component, trainer_flags_call

# The fine-tuning program's own flags, before the trainers' (kftrain_components.training.trainer_flags).
OWN = {
    "--model-uri": Parameter(
        "model_uri",
        "str",
        "--model-uri, the base model (a Hugging Face folder, s3:// prefix, /workspace/model); empty: the embedded "
        "tiny Llama, made at run time from the training texts.",
        "",
    ),
    "--method": Parameter("method", "str", "--method, lora or full (empty: the program's default, lora).", ""),
    "--max-length": Parameter(
        "max_length", "int", "--max-length, tokens of prompt + response (0: the program's default).", 0
    ),
    "--lora-r": Parameter("lora_r", "int", "--lora-r, the rank of the LoRA adapters (0: the program's default).", 0),
}
OWN_FLAGS = ", ".join(f"{flag!r}: {p.name}" for flag, p in OWN.items())
BODY = f"""from kftrain.launch.component import PROGRAM_FLAGS
from kftrain.programs.common import trainer_flags

own = {{{OWN_FLAGS}}}
flags = [part for flag, value in own.items() if value for part in (flag, str(value))]
common = {trainer_flags_call("[*flags, *extra]")}
return [*PROGRAM_FLAGS, *common]
"""

finetune_args = flags_component(__name__, list(OWN.values()), BODY)

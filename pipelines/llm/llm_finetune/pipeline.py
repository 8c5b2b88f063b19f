"""Fine-tune a language model on instruction data: prepare the examples (JSON Lines or Parquet with prompt and
response fields or chat messages, by URI, or a built-in synthetic task), fine-tune with Transformers and PEFT (LoRA
or every weight) as a PyTorchJob or a Kubeflow Trainer v2 TrainJob on torch-distributed (job_kind), evaluate before
and after (loss, perplexity, exact match of greedy answers), and export it for KServe's Hugging Face runtime when it
passes the quality gate."""

from typing import Any

from kfp import dsl

from kftrain.inputs.evaluate_llm import EvaluateLanguageModelInputs
from kftrain.inputs.export_llm import ExportLanguageModelInputs
from kftrain.inputs.prep_instructions import PrepareInstructionsInputs
from kftrain_components.control.fail.component import fail
from kftrain_components.data.prepare_instructions.component import prepare_instructions
from kftrain_components.evaluation.evaluate_language_model.component import evaluate_language_model
from kftrain_components.export.export_language_model.component import export_language_model
from kftrain_components.images import PYTORCH_IMAGE
from kftrain_components.training.finetune_args.component import finetune_args
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from kftrain_pipelines.stages import (
    PLATFORM,
    STEP_PLACEMENTS,
    Param,
    pipeline_function,
    quality_gate,
    step_params,
    use_platform_settings,
    values,
    with_defaults,
)
from kftrain_pipelines.stages import TRAINING as TRAINER_FLAGS

FINETUNE = "kftrain.programs.hf_finetune"
# A PyTorchJob's replicas get MASTER_ADDR, RANK and WORLD_SIZE from the operator; a torch-distributed TrainJob's nodes
# get PET_* variables, which torchrun turns into those.
FINETUNE_COMMAND = ("torchrun", "-m", FINETUNE)
COMMANDS = {"PyTorchJob": ("python", "-m", FINETUNE), "TrainJob": FINETUNE_COMMAND}
JOB_KINDS = tuple(COMMANDS)

DATA = (
    *step_params(
        PrepareInstructionsInputs,
        "source",
        "prompt_field",
        "response_field",
        "messages_field",
        "invalid",
        "test_fraction",
    ),
    Param("seed", int, 42, "Seed of the split and of the training."),
)
MODEL = (
    Param(
        "model_uri",
        str,
        "",
        "The base model: a Hugging Face folder (path, s3:// prefix); empty: a tiny Llama made at run time from the "
        "training texts (nothing downloaded).",
    ),
    Param(
        "method",
        str,
        "full",
        "full (every weight: the embedded model is made untrained) or lora (adapters on a frozen pretrained base).",
    ),
    Param("max_length", int, 0, "Tokens of prompt + response; longer ones are cut (0: the program's default)."),
    Param("lora_r", int, 0, "Rank of the LoRA adapters (0: the program's default)."),
)
JOB = (
    Param("job_kind", str, "PyTorchJob", "The job that fine-tunes: PyTorchJob or TrainJob (torch-distributed)."),
    Param("image", str, PYTORCH_IMAGE, "Image of every replica on a cluster (with kftrain[llm]); locally unused."),
    Param("workers", int, 1, "PyTorchJob: Worker replicas besides the Master (DDP over all of them)."),
    Param("num_nodes", int, 2, "TrainJob: the trainer's nodes, each running torchrun."),
    Param("runtime", str, "torch-distributed", "TrainJob: the ClusterTrainingRuntime (a torch one)."),
)
# The trainers' flags, as the digits pipelines have them; for the embedded model's full training (a pretrained base
# with lora learns at about 0.0002).
TRAINING = with_defaults(
    TRAINER_FLAGS, {"epochs": 5, "global_batch_size": 64, "batch_size": 0, "learning_rate": 0.003}, __name__
)
QUALITY = step_params(
    EvaluateLanguageModelInputs,
    "gate_metric",
    "gate_threshold",
    "max_new_tokens",
    "compare_base",
    gate_metric="exact_match",
)
EXPORT = step_params(ExportLanguageModelInputs, "model_name", "merge_adapters", "register_model", model_name="llm")
EVERY = [*DATA, *MODEL, *JOB, *TRAINING, *QUALITY, *EXPORT, *PLATFORM]

# The gate's export (made at import: KFP refuses a pipeline defined in another).
GATE = quality_gate("quality-gate-llm", export_language_model, [("merge_adapters", bool), ("max_new_tokens", int)])

# The gate's own parameters the pipeline passes by name (it also carries the step placements to its export).
GATE_INPUTS = ("model_name", "merge_adapters", "max_new_tokens", "register_model", "mlflow_tracking_uri")


def launch(kind: str, p: Any, dataset_uri: Any, args: Any, platform: dict[str, Any]) -> dsl.PipelineTask:
    """The launch task of ``kind`` running the fine-tuning program, with ``args`` (finetune_args' output)."""
    common = {"dataset_uri": dataset_uri, "image": p.image, "command": list(COMMANDS[kind]), "args": args, **platform}
    if kind == "PyTorchJob":
        return pytorchjob_launch(workers=p.workers, **common)
    return trainjob_launch(runtime=p.runtime, num_nodes=p.num_nodes, **common)


def wire(p: Any) -> None:
    """Prep and the program's flags, then one branch per job kind: launch -> evaluate -> gate -> export (KFP's local
    runner has no ``dsl.OneOf`` for artifacts, so each branch evaluates its own launch's model); another kind fails."""
    prep = prepare_instructions(**values(p, DATA))
    prep.set_caching_options(False)  # a source URI's content can change between runs
    flags = finetune_args(**values(p, [*MODEL, *TRAINING]), seed=p.seed)
    flags.set_caching_options(False)  # it takes model_uri: no step given a URI is replayed from cache
    for task in (prep, flags):
        use_platform_settings(task, p)
    dataset_uri = prep.outputs["dataset_uri"]
    branches = (dsl.If, dsl.Elif)
    for branch, kind in zip(branches, JOB_KINDS, strict=True):
        with branch(p.job_kind == kind, name=kind.lower()):
            train = launch(kind, p, dataset_uri, flags.output, values(p, PLATFORM))
            train.set_caching_options(False)  # a training job is never replayed from cache
            use_platform_settings(train, p)
            evaluation = evaluate_language_model(
                model=train.outputs["model"],
                dataset_uri=dataset_uri,
                mlflow_tracking_uri=p.mlflow_tracking_uri,
                **values(p, QUALITY),
            )
            evaluation.set_caching_options(False)  # the model is new in every run; the dataset may be rewritten
            use_platform_settings(evaluation, p)
            GATE(
                passed=evaluation.outputs["passed"],
                model=train.outputs["model"],
                evaluation_metrics=evaluation.outputs["metrics"],
                dataset_uri=dataset_uri,
                **values(p, [q for q in (*QUALITY, *EXPORT, *PLATFORM) if q.name in GATE_INPUTS]),
                **{name: getattr(p, name) for name in STEP_PLACEMENTS},
            )
    with dsl.Else(name="unknown-job-kind"):
        failed = fail(message=f"job_kind must be one of {', '.join(JOB_KINDS)}", value=p.job_kind)
        use_platform_settings(failed, p)


llm_finetune = pipeline_function(__name__, EVERY, wire)

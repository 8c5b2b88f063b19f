"""Trainer's torchtune runtimes (a trainer command of ``tune run``): the command the torch plugin completes, the rules
its webhook applies, the overrides typed inputs become, and whether torchtune runs here.

Facts from kubeflow/trainer@v2.3.0: ``pkg/runtime/framework/plugins/torch/torch.go:175-201`` (the command),
``torchtune.go:35-205`` (recipe, config, rules), ``pkg/constants/constants.go:205-318`` (names); the typed inputs are
the SDK's ``TorchTuneConfig`` fields and the override each becomes (kubeflow/sdk@e2dac76c:kubeflow/trainer/backends/
kubernetes/utils.py, get_args_using_torchtune_config). The runtime image pins torchtune 0.6.1 with torchao 0.15.0
(kubeflow/trainer@v2.3.0:cmd/trainers/torchtune/requirements.txt:1-2).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.nodes import gpus_per_node, source, torch_nproc_per_node
from kftrain.job.kinds.trainjob.runtime import NODE, node_container
from kftrain.job.model import TrainingJob

ENTRYPOINT = ["tune", "run"]  # constants.go:314-315 TorchTuneEntrypoint
# constants.go:317-318: set by the runtime's command, never by the TrainJob's args.
IMMUTABLE = ("output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file")
MODELS = ("llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")  # constants.go:282-312
MULTI_NODE_MODEL = "llama3_3/70B"
TRAINER_PORT = 29500  # constants.go:71-72 ContainerTrainerPort
PACKAGES = "torchtune==0.6.1 torchao==0.15.0"  # the runtime image's (requirements.txt:1-2)

# typed input -> the `tune run` override it becomes, in the order the SDK appends them (utils.py); a value that is
# empty (None, "", [], {}) adds nothing. A list becomes [a,b], a bool True/False, as the SDK writes them.
OVERRIDES: tuple[tuple[str, str], ...] = (
    ("dtype", "dtype"),
    ("batch_size", "batch_size"),
    ("epochs", "epochs"),
    ("loss", "loss"),
    ("data_dir", "dataset.data_dir"),
    ("data_files", "dataset.data_files"),
    ("apply_lora_to_mlp", "model.apply_lora_to_mlp"),
    ("apply_lora_to_output", "model.apply_lora_to_output"),
    ("lora_rank", "model.lora_rank"),
    ("lora_alpha", "model.lora_alpha"),
    ("lora_dropout", "model.lora_dropout"),
    ("quantize_base", "model.quantize_base"),
    ("use_dora", "model.use_dora"),
    ("lora_attn_modules", "model.lora_attn_modules"),
    ("dataset", "dataset"),
    ("dataset_source", "dataset.source"),
    ("dataset_split", "dataset.split"),
    ("train_on_input", "dataset.train_on_input"),
    ("new_system_prompt", "dataset.new_system_prompt"),
    ("column_map", "dataset.column_map"),
    # Beyond the SDK's: what a run on a CPU needs (the configs name cuda, bf16 and a bitsandbytes optimizer).
    ("learning_rate", "optimizer.lr"),
    ("optimizer", "optimizer._component_"),
    ("max_steps_per_epoch", "max_steps_per_epoch"),
    ("device", "device"),
    ("seed", "seed"),
)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)  # True / False, as Python's str() in the SDK
    if isinstance(value, list | tuple):
        return f"[{','.join(str(v) for v in value)}]"
    return str(value)


def overrides(values: Mapping[str, Any]) -> list[str]:
    """``key=value`` for every typed input of :data:`OVERRIDES` given in ``values``, in the table's order."""
    known = {name for name, _ in OVERRIDES}
    unknown = sorted(set(values) - known)
    if unknown:
        raise JobSpecError(unknown[0], f"not a torchtune input; known: {', '.join(sorted(known))}")
    empty: tuple[Any, ...] = (None, "", [], {}, ())
    return [f"{key}={_text(values[name])}" for name, key in OVERRIDES if values.get(name) not in empty]


def model_of(runtime_name: str) -> str:
    """torchtune.go:199-205: ``torchtune-llama3.2-1b`` -> ``llama3_2/1B``; another shape of name -> ``""``."""
    fields = runtime_name.split("-")
    return f"{fields[1].replace('.', '_')}/{fields[2].upper()}" if len(fields) == 3 else ""


def _enabled(args: Sequence[str], item: str) -> bool:
    """torchtune.go:149-160: a ``key=value`` whose key holds ``item`` and whose value is true (any case)."""
    for arg in args:
        key, equals, value = arg.partition("=")
        if equals and item in key and value.strip().lower() == "true":
            return True
    return False


def uses_lora(args: Sequence[str]) -> bool:
    return any("model.lora_attn_modules" in a for a in args)  # torchtune.go:136-143


def uses_qlora(args: Sequence[str]) -> bool:
    return not _enabled(args, "model.use_dora") and _enabled(args, "model.quantize_base")  # torchtune.go:163-169


def recipe_and_config(runtime_name: str, num_nodes: int, nproc: str, gpus: int, args: Sequence[str]) -> tuple[str, str]:
    """torchtune.go:108-133: the recipe and config the plugin picks (``nproc``: numProcPerNode, "auto" or a number)."""
    recipe, suffix = "full_finetune_distributed", "_full"
    if num_nodes == 1 and (nproc == "1" or gpus == 1):
        if uses_qlora(args):
            recipe, suffix = "lora_finetune_single_device", "_qlora_single_device"
        elif uses_lora(args):
            recipe, suffix = "lora_finetune_single_device", "_lora_single_device"
        else:
            recipe, suffix = "full_finetune_single_device", "_full_single_device"
    elif num_nodes == 1 and uses_qlora(args):
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif num_nodes == 1 and uses_lora(args):
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif num_nodes > 1:
        suffix = "_full_multinode"
    return recipe, model_of(runtime_name) + suffix


def completed_command(
    job_name: str, runtime_name: str, num_nodes: int, nproc: str, gpus: int, args: Sequence[str],
    runtime_command: Sequence[str],
) -> list[str]:  # fmt: skip
    """torch.go:175-201: ``tune run``, the rendezvous endpoint when several processes run, the recipe, ``--config``
    and its config, and the runtime command's immutable overrides (torchtune.go:171-197)."""
    command = list(ENTRYPOINT)
    several = num_nodes > 1 or (nproc.isdigit() and int(nproc) > 1) or (not nproc.isdigit() and gpus > 1)
    if several:
        command.append(f"--rdzv_endpoint={job_name}-node-0-0.{job_name}:{TRAINER_PORT}")
    recipe, config = recipe_and_config(runtime_name, num_nodes, nproc, gpus, args)
    return [*command, recipe, "--config", config, *(c for c in runtime_command if c.split("=")[0] in IMMUTABLE)]


def validate(runtime_name: str, num_nodes: int, nproc: str, gpus: int, args: Sequence[str]) -> None:
    """torchtune.go:35-104, the webhook's rules for a ``tune run`` TrainJob; the first broken one, naming its field."""
    model = model_of(runtime_name)
    if model not in MODELS:
        raise JobSpecError(
            "spec.runtimeRef.name", f"{runtime_name!r} must have a supported pretrained model ({model!r})"
        )
    if num_nodes > 1 and model != MULTI_NODE_MODEL:
        raise JobSpecError("spec.trainer.numNodes", f"must be 1 for {model} model, got {num_nodes}")
    _, config = recipe_and_config(runtime_name, num_nodes, nproc, gpus, args)
    if "_qlora" in config:
        if model == "qwen2_5/1.5B":
            raise JobSpecError("spec.runtimeRef.name", f"QLoRA is not supported for {model} model")
        if "_qlora_single_device" not in config and model in ("llama3_2/1B", "llama3_2/3B"):
            raise JobSpecError("spec.trainer.numProcPerNode", f"must be auto or 1 for {model} model when using QLoRA")
    if num_nodes > 1 and (uses_lora(args) or uses_qlora(args)):
        raise JobSpecError("spec.trainer.numNodes", "LoRA fine-tuning is not supported for multi-node training")
    for i, arg in enumerate(args):
        if arg.split("=", 1)[0] in IMMUTABLE:
            raise JobSpecError(f"spec.trainer.args[{i}]", f"must not set {arg.split('=', 1)[0]!r}: the runtime sets it")


@functools.cache
def local_problem(python: str = sys.executable) -> str | None:
    """Why ``tune run`` cannot run with this environment's torch (one line), or None: torchtune imports with its
    recipes' modules in a process of its own (torchao's C++ extensions are skipped, with a warning, on a newer
    torch)."""
    probe = "import torch, torchtune, torchtune.training, torchtune.config; print(torch.__version__)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"torchtune's import could not be checked ({exc})"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {done.returncode}"
    if "No module named 'torchtune'" in last:
        return f"torchtune is not installed here (pip install {PACKAGES}, the runtime image's)"
    return f"torchtune cannot run with this torch: {last}"


def _runs_tune(job: TrainingJob, spec: Mapping[str, Any]) -> bool:
    trainer = spec.get("trainer") or {}
    return list(trainer.get("command") or []) == ENTRYPOINT and "torch" in source(job).resolved.ml_policy


def complete(job: TrainingJob) -> None:
    """The trainer's command as the torch plugin completes a ``tune run`` on a torch runtime
    (:func:`completed_command`), on the resolved pod and the job's replica spec alike: what a node runs."""
    src = source(job)
    rjob = src.resolved.trainer_job
    if rjob is None or not _runs_tune(job, src.spec):
        return
    runtime_jobs = src.resolved.runtime.spec.get("template", {}).get("spec", {}).get("replicatedJobs") or []
    template = next((j.get("template") or {} for j in runtime_jobs if j.get("name") == rjob.name), {})
    given = node_container((template.get("spec") or {}).get("template") or {}) or {}
    args = list((src.spec.get("trainer") or {}).get("args") or [])
    nproc, gpus = torch_nproc_per_node(job), gpus_per_node(job)
    command = completed_command(
        job.name, src.resolved.runtime.name, rjob.count, nproc, gpus, args, list(given.get("command") or [])
    )
    resolved_container = node_container(rjob.pod_template)
    if resolved_container is not None:
        resolved_container["command"] = command
    for container in job.replica_specs[rjob.name].template.spec.containers:
        if container.name == NODE:
            container.command = list(command)


def check(job: TrainingJob, spec: Mapping[str, Any]) -> None:
    """:func:`validate` for a TrainJob ``spec`` (as submitted) running ``tune run`` on a torch runtime."""
    if not _runs_tune(job, spec):
        return
    trainer = spec.get("trainer") or {}
    nproc = str(trainer["numProcPerNode"]) if trainer.get("numProcPerNode") is not None else "auto"
    num_nodes = int(trainer.get("numNodes") or 1)
    validate(spec["runtimeRef"]["name"], num_nodes, nproc, gpus_per_node(job), list(trainer.get("args") or []))

"""Trainer's torchtune runtimes: the `tune run` command the torch plugin completes, its webhook's rules, the overrides
typed inputs become, and the local run (refused in one line where torchtune cannot run; run where it can).

Each case cites kubeflow/trainer@v2.3.0 (paths under ``pkg/runtime/framework/plugins/torch/``)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import load_manifest, render_manifest
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.trainjob import torchtune
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.nodes import source
from kftrain.job.kinds.trainjob.runtime import parse_runtime
from kftrain.job.topology import ReplicaId
from testbed import REPO_ROOT
from testbed.manifests import trainjob
from testbed.needs import installed, require
from testbed.node_env import node_env

LLAMA_1B = "torchtune-llama3.2-1b"
RUNTIME_OVERRIDES = [
    "output_dir=/workspace/output",
    "tokenizer.path=/workspace/model/original/tokenizer.model",
    "checkpointer.checkpoint_dir=/workspace/model",
]
LORA = ["model.lora_attn_modules=[q_proj,v_proj]"]
QLORA = [*LORA, "model.quantize_base=True"]

# The recipes (pkg/constants/constants.go:211-236).
FULL_1, LORA_1 = "full_finetune_single_device", "lora_finetune_single_device"
FULL_N, LORA_N = "full_finetune_distributed", "lora_finetune_distributed"
# (id, runtime, numNodes, numProcPerNode (auto or a number), GPUs per node, args, recipe, config): torchtune.go:108-133
RECIPES = [
    ("one process: full", LLAMA_1B, 1, "1", 0, [], FULL_1, "llama3_2/1B_full_single_device"),
    ("one GPU: lora", LLAMA_1B, 1, "auto", 1, LORA, LORA_1, "llama3_2/1B_lora_single_device"),
    ("one process: qlora", LLAMA_1B, 1, "1", 0, QLORA, LORA_1, "llama3_2/1B_qlora_single_device"),
    ("dora turns qlora off", LLAMA_1B, 1, "1", 0, [*QLORA, "model.use_dora=true"], LORA_1,
     "llama3_2/1B_lora_single_device"),
    ("quantize_base=False is no qlora", LLAMA_1B, 1, "1", 0, [*LORA, "model.quantize_base=False"], LORA_1,
     "llama3_2/1B_lora_single_device"),
    ("two GPUs: full", LLAMA_1B, 1, "auto", 2, [], FULL_N, "llama3_2/1B_full"),
    ("two GPUs: lora", LLAMA_1B, 1, "auto", 2, LORA, LORA_N, "llama3_2/1B_lora"),
    ("two GPUs: qlora", LLAMA_1B, 1, "auto", 2, QLORA, LORA_N, "llama3_2/1B_qlora"),
    ("two nodes", "torchtune-llama3.3-70b", 2, "auto", 8, [], FULL_N, "llama3_3/70B_full_multinode"),
    ("qwen", "torchtune-qwen2.5-1.5b", 1, "1", 0, [], FULL_1, "qwen2_5/1.5B_full_single_device"),
]  # fmt: skip


@pytest.mark.parametrize(("runtime", "nodes", "nproc", "gpus", "args", "recipe", "config"),
                         [c[1:] for c in RECIPES], ids=[c[0] for c in RECIPES])  # fmt: skip
def test_the_recipe_and_config_the_plugin_picks(runtime, nodes, nproc, gpus, args, recipe, config):
    assert torchtune.recipe_and_config(runtime, nodes, nproc, gpus, args) == (recipe, config)


def test_model_of_a_runtime_name():
    """torchtune.go:199-205."""
    assert torchtune.model_of("torchtune-qwen2.5-1.5b") == "qwen2_5/1.5B"
    assert torchtune.model_of("torch-distributed") == ""


def tune_job(numProcPerNode: int | None = 1, args: list[str] | None = None, runtime: str = LLAMA_1B, **trainer):
    given = {"command": ["tune", "run"], "args": args or ["epochs=1"], **trainer}
    if numProcPerNode is not None:
        given["numProcPerNode"] = numProcPerNode
    return load_manifest(trainjob(runtime, trainer=given))


def node_command(job) -> list[str]:
    (container,) = [c for c in job.replica_specs["node"].template.spec.containers if c.name == "node"]
    return [*container.command, *(container.args or [])]


def test_a_tune_run_node_runs_the_command_the_plugin_completes(crd_schemas):
    """torch.go:175-201: recipe and config appended, then the runtime command's immutable overrides (torchtune.go:
    171-197), the TrainJob's args after them; the rendered TrainJob is as given (the plugin completes it there)."""
    job = tune_job(args=["epochs=1", "batch_size=2"])
    assert node_command(job) == [
        "tune", "run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device",
        *RUNTIME_OVERRIDES, "epochs=1", "batch_size=2",
    ]  # fmt: skip
    kind_of(job).validate(job)
    rendered = render_manifest(job)
    assert rendered["spec"]["trainer"]["command"] == ["tune", "run"]
    assert rendered["spec"]["trainer"]["args"] == ["epochs=1", "batch_size=2"]
    crd_schemas.validate(rendered)
    env = node_env(job, ReplicaId("node", 0))  # torch.go:168-177: the PET_* counts, no master (tune's rendezvous)
    assert env["PET_NNODES"] == "1" and env["PET_NPROC_PER_NODE"] == "1"
    assert "PET_MASTER_ADDR" not in env and "PET_MASTER_PORT" not in env


def test_the_runtimes_two_gpus_give_the_distributed_recipe_and_a_rendezvous():
    """The runtime's node asks for 2 GPUs (manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml:100-102):
    numProcPerNode auto -> several processes -> torch.go:184-191's endpoint on node 0."""
    job = tune_job(numProcPerNode=None)
    assert node_command(job)[:6] == [
        "tune", "run", "--rdzv_endpoint=tj-node-0-0.tj:29500", "full_finetune_distributed", "--config",
        "llama3_2/1B_full",
    ]  # fmt: skip


def test_trainers_torchtune_runtimes_are_known_by_name():
    """manifests/base/runtimes/kustomization.yaml installs torchtune/ with the others: initializers, then the node."""
    for name in ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"):
        job = tune_job(runtime=name)
        resolved = source(job).resolved
        assert [j.name for j in resolved.jobs] == ["dataset-initializer", "model-initializer", "node"], name
        assert [r.type for r in kind_of(job).initializer_replicas(job)] == ["dataset-initializer", "model-initializer"]
    qwen = node_command(tune_job(runtime="torchtune-qwen2.5-1.5b"))
    assert "tokenizer.merges_file=/workspace/model/merges.txt" in qwen


# (id, trainer changes, runtime, field, message): torchtune.go:35-104
REFUSED = [
    ("an unknown model", {}, "torchtune-llama9-7b", "spec.runtimeRef.name", "supported pretrained model"),
    ("two nodes of a 1B", {"numNodes": 2}, LLAMA_1B, "spec.trainer.numNodes", "must be 1 for llama3_2/1B"),
    ("qlora on qwen", {"args": QLORA}, "torchtune-qwen2.5-1.5b", "spec.runtimeRef.name", "QLoRA is not supported"),
    ("qlora on 2 processes", {"args": QLORA, "numProcPerNode": 2}, LLAMA_1B, "spec.trainer.numProcPerNode",
     "auto or 1"),
    ("lora on two nodes", {"args": LORA, "numNodes": 2}, "torchtune-llama3.3-70b", "spec.trainer.numNodes",
     "multi-node"),
    ("an immutable override", {"args": ["epochs=1", "output_dir=/tmp/x"]}, LLAMA_1B, r"spec.trainer.args\[1\]",
     "output_dir"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "runtime", "field", "message"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])  # fmt: skip
def test_what_the_torchtune_webhook_refuses(changes, runtime, field, message):
    manifest = builtin_manifest(LLAMA_1B)  # the same runtime under the name the case gives
    manifest["metadata"]["name"] = runtime
    catalog = RuntimeCatalog([parse_runtime(manifest, "rt.yaml")])
    manifest = trainjob(runtime, trainer={"command": ["tune", "run"], "numProcPerNode": 1, **changes})
    with pytest.raises(JobSpecError, match=f"{field}.*{message}"):
        load_manifest(manifest, runtimes=catalog)  # loading validates it, as submitting does


# -- typed inputs -> `tune run` overrides: the one table (torchtune.OVERRIDES) ------------------------------------


def test_typed_inputs_become_the_overrides_the_sdk_writes():
    """The Trainer guide's TorchTuneConfig (docs/user-guides/builtin-trainer/torchtune.md:203-223), as the SDK turns
    it into args, then the CPU inputs."""
    given = {
        "dtype": "bf16", "batch_size": 10, "epochs": 10, "loss": "torchtune.modules.loss.CEWithChunkedOutputLoss",
        "lora_rank": 8, "lora_alpha": 16, "lora_dropout": 0.1, "lora_attn_modules": ["q_proj", "v_proj"],
        "dataset": "torchtune.datasets.instruct_dataset", "dataset_source": "parquet", "dataset_split": "train[:95%]",
        "train_on_input": True, "column_map": {"input": "incorrect", "output": "correct"},
        "device": "cpu", "learning_rate": 0.001, "data_dir": "", "seed": None,
    }  # fmt: skip
    assert torchtune.overrides(given) == [
        "dtype=bf16", "batch_size=10", "epochs=10", "loss=torchtune.modules.loss.CEWithChunkedOutputLoss",
        "model.lora_rank=8", "model.lora_alpha=16", "model.lora_dropout=0.1", "model.lora_attn_modules=[q_proj,v_proj]",
        "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet", "dataset.split=train[:95%]",
        "dataset.train_on_input=True", "dataset.column_map={'input': 'incorrect', 'output': 'correct'}",
        "optimizer.lr=0.001", "device=cpu",
    ]  # fmt: skip
    # The lora inputs pick the lora recipe, as the plugin reads them back.
    assert (
        torchtune.recipe_and_config(LLAMA_1B, 1, "1", 0, torchtune.overrides(given))[0] == "lora_finetune_single_device"
    )


def test_an_unknown_typed_input_is_refused_naming_it():
    with pytest.raises(JobSpecError, match="lora_rnak: not a torchtune input"):
        torchtune.overrides({"lora_rnak": 8})


# -- locally ------------------------------------------------------------------------------------------------------


def fake_python(tmp_path: Path, stderr: str) -> str:
    program = tmp_path / "python"
    program.write_text(f"#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho {stderr!r} >&2\nexit 1\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return str(program)


def test_why_torchtune_cannot_run_is_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    missing = fake_python(tmp_path / "a", "ModuleNotFoundError: No module named 'torchtune'")
    assert torchtune.local_problem(missing) == (
        "torchtune is not installed here (pip install torchtune==0.6.1 torchao==0.15.0, the runtime image's)"
    )
    (tmp_path / "b").mkdir()
    broken = fake_python(tmp_path / "b", "ImportError: cannot import name 'foo' from 'torch.distributed'")
    problem = torchtune.local_problem(broken)
    assert (
        problem
        == "torchtune cannot run with this torch: ImportError: cannot import name 'foo' from 'torch.distributed'"
    )
    # This environment's own answer: None exactly where torchtune imports.
    assert (torchtune.local_problem(sys.executable) is None) == installed("torchtune")


def test_the_local_backend_refuses_before_anything_is_created(monkeypatch):
    from kftrain.backends.local import backend as local

    monkeypatch.setattr(torchtune, "local_problem", lambda: "torchtune is not installed here (pip install x)")

    def created(*_args, **_kwargs):
        raise AssertionError("the job's name was claimed: something was created")

    monkeypatch.setattr(local.job_state, "claim_name", created)
    with pytest.raises(JobSpecError) as refused:
        local.LocalBackend().submit(tune_job())
    assert str(refused.value) == (
        "spec.trainer.command: ['tune', 'run'] runs locally only where torchtune does: torchtune is not installed "
        "here (pip install x)"
    )
    assert "\n" not in str(refused.value)


# -- a real local run, where torchtune is installed -------------------------------------------------------------

# A Llama 3.2 architecture a few layers deep: the vocabulary is Llama 3's (128,256: its tokenizer's special tokens
# are numbered up to there), the rest tiny, so that the 1B runtime's configs run it with `model.*` overrides.
TINY = {"vocab_size": 128256, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "embed_dim": 64, "max_seq_len": 512,
        "intermediate_dim": 128}  # fmt: skip


def tiny_llama_folder(root: Path) -> Path:
    """The model initializer's layout of a model the user gives: Hugging Face weights and config, and the Llama 3
    tokenizer's tiktoken file at original/tokenizer.model (here the 256 bytes, so nothing is downloaded)."""
    import base64

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=TINY["vocab_size"], hidden_size=TINY["embed_dim"], intermediate_size=TINY["intermediate_dim"],
        num_hidden_layers=TINY["num_layers"], num_attention_heads=TINY["num_heads"],
        num_key_value_heads=TINY["num_kv_heads"], head_dim=16, tie_word_embeddings=True, rope_theta=500000.0,
        max_position_embeddings=TINY["max_seq_len"],
    )  # fmt: skip
    model = root / "model"
    LlamaForCausalLM(config).save_pretrained(model)
    (model / "original").mkdir()
    ranks = "".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256))
    (model / "original" / "tokenizer.model").write_text(ranks)
    return model


@pytest.mark.slow
def test_a_torchtune_runtime_runs_locally_with_the_users_model(tmp_path, monkeypatch):
    """Trainer's torchtune-llama3.2-1b runtime with a model the user gives (the model initializer copies it from a
    file:// URI): torchtune's own full_finetune_single_device recipe trains it on a JSON Lines task on the CPU,
    the overrides built from typed inputs. Where torchtune is not installed the step is refused instead (above)."""
    import subprocess

    import yaml

    require("torchtune", "transformers", reason=f"pip install {torchtune.PACKAGES}")
    monkeypatch.setenv("KFTRAIN_STATE_DIR", str(tmp_path / "state"))
    model = tiny_llama_folder(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"input": f"reverse abc{i}", "output": f"{i}cba"} for i in range(16)]
    (data / "train.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [f"model.{k}={v}" for k, v in TINY.items()]
    args.insert(0, "model._component_=torchtune.models.llama3_2.llama3_2")
    args += torchtune.overrides({
        "dtype": "fp32", "batch_size": 4, "epochs": 1, "dataset": "torchtune.datasets.instruct_dataset",
        "dataset_source": "json", "data_files": "/workspace/dataset/train.json", "dataset_split": "train",
        "learning_rate": 0.001, "optimizer": "torch.optim.AdamW", "max_steps_per_epoch": 2, "device": "cpu",
    })  # fmt: skip
    args += ["optimizer_in_bwd=False", "log_peak_memory_stats=False"]
    manifest = trainjob(
        LLAMA_1B, name="tune-tiny",
        initializer={"model": {"storageUri": f"file://{model}"}, "dataset": {"storageUri": f"file://{data}"}},
        trainer={"command": ["tune", "run"], "numProcPerNode": 1, "args": args},
    )  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(manifest))
    command = [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(tmp_path / "job.yaml"), "--local"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "full_finetune_single_device" in out or "FullFinetuneRecipeSingleDevice" in out, out[-4000:]
    assert "1|2|Loss:" in out and "tune-tiny succeeded" in out, out[-4000:]


def test_the_docs_table_of_overrides_is_the_code_s():
    """docs/llm-finetuning.md's table of typed inputs and overrides, row by row, is :data:`torchtune.OVERRIDES`."""
    page = (REPO_ROOT / "docs" / "llm-finetuning.md").read_text()
    table = page.split("<!-- begin: torchtune overrides", 1)[1].split("<!-- end: torchtune overrides", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `")]
    assert [(a.strip().strip("`"), b.strip().strip("`")) for a, b in rows] == list(torchtune.OVERRIDES)

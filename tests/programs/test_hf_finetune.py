"""The fine-tuning program: LoRA and full runs that reload through load_finetuned, the metric lines, a constant
global batch whatever the micro-batch, an exact resume from a checkpoint; slow: a 2-replica PyTorchJob through the
local backend that loses a replica and resumes, and what the embedded tiny model learns."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from kftrain import storage
from kftrain.llm import model_io, synthetic
from kftrain.llm.instructions import Example, Split, publish
from kftrain.metrics import parse_line
from testbed.llm import MICRO_SHAPE, micro_model
from testbed.needs import requires

if TYPE_CHECKING:
    import torch

# The program imports PyTorch at its top: it is imported by the tests that run, not at collection (testbed/needs.py).
pytestmark = requires("peft", "torch")

MICRO = ",".join(f"{k}={v}" for k, v in MICRO_SHAPE.items())


def _dataset(folder: Path, rows: int = 80, test: int = 16) -> str:
    data = [Example(r["prompt"], r["response"]) for r in synthetic.rows("reverse", rows, seed=0)]
    publish(str(folder), Split(data[: rows - test], data[rows - test :], 0, 0), {"source": "tests"})
    return str(folder)


def _args(dataset: str, out: Path | str, *extra: str) -> list[str]:
    return ["--dataset", dataset, "--model-dir", str(out), "--tiny-shape", MICRO, "--lr", "1e-2", "--epochs", "2",
            "--global-batch-size", "16", "--batch-size", "8", "--log-every-steps", "2", *extra]  # fmt: skip


def _weights(uri: str) -> dict[str, torch.Tensor]:
    model, _, _ = model_io.load_finetuned(uri, merge=True)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=atol) for k in a)


@pytest.fixture(scope="module")
def hf_finetune() -> ModuleType:
    from kftrain.programs import hf_finetune

    return hf_finetune


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _dataset(tmp_path_factory.mktemp("llm") / "dataset")


def test_lora_run_reports_metrics_and_writes_a_self_contained_model(hf_finetune, dataset, tmp_path, capsys) -> None:
    assert hf_finetune.main(_args(dataset, tmp_path / "model", "--method", "lora")) == 0
    lines = [parsed for line in capsys.readouterr().out.splitlines() if (parsed := parse_line(line))]
    assert lines[0] == ("total", {"step": 8.0})  # 64 rows / 16 per step x 2 epochs
    points = [values for kind, values in lines if kind == "point" and "loss" in values]
    assert [p["step"] for p in points] == [2, 4, 6, 8]
    assert all(p["tokens_per_s"] > 0 and p["learning_rate"] > 0 for p in points)
    assert points[-1]["loss"] < points[0]["loss"]
    model, tokenizer, info = model_io.load_finetuned(str(tmp_path / "model"))
    assert info["method"] == "lora" and info["base_model"] == hf_finetune.EMBEDDED
    assert (tmp_path / "model" / model_io.BASE_DIR / "config.json").is_file()  # the base made at run time travels
    assert type(model).__name__.startswith("Peft") and tokenizer.eos_token == "</s>"
    assert info["metrics"]["steps"] == 8 and info["metrics"]["eval_loss"] > 0


def test_full_run_on_a_base_model_from_s3(hf_finetune, dataset, tmp_path, s3_env) -> None:
    base = storage.join(s3_env, "base")
    storage.upload(micro_model(tmp_path / "base"), base)
    out = storage.join(s3_env, "finetuned")
    assert hf_finetune.main(_args(dataset, out, "--method", "full", "--model-uri", base)) == 0
    tuned, _, info = model_io.load_finetuned(out)
    assert info["method"] == "full" and info["base_model"] == base
    start, _ = model_io.load_model(base)
    assert not _close(tuned.state_dict(), start.state_dict(), atol=1e-4)  # trained, not copied


def test_the_global_batch_not_the_micro_batch_decides_what_is_trained(hf_finetune, dataset, tmp_path) -> None:
    one = tmp_path / "one"
    four = tmp_path / "four"
    hf_finetune.main(_args(dataset, one, "--method", "full", "--batch-size", "16"))
    hf_finetune.main(_args(dataset, four, "--method", "full", "--batch-size", "4"))
    assert _close(_weights(str(one)), _weights(str(four)), atol=1e-4)


def test_a_resume_from_a_checkpoint_trains_what_an_uninterrupted_run_does(
    hf_finetune, dataset, tmp_path, caplog
) -> None:
    import torch

    whole, ckpt = tmp_path / "whole", tmp_path / "ckpt"
    flags = ("--checkpoint-every-steps", "2", "--checkpoint-every-epochs", "0", "--keep-checkpoints", "10")
    hf_finetune.main(_args(dataset, whole, "--checkpoint-dir", str(ckpt), *flags))
    state = torch.load(ckpt / "ckpt-0000000004" / "state.pt", weights_only=True)
    assert state["model"] and all("lora_" in name for name in state["model"])  # the adapter, not the frozen base
    resumed_ckpt = tmp_path / "resumed-ckpt"
    resumed_ckpt.mkdir()
    shutil.copytree(ckpt / "ckpt-0000000004", resumed_ckpt / "ckpt-0000000004")
    with caplog.at_level("INFO", logger="kftrain.trainer"):
        hf_finetune.main(_args(dataset, tmp_path / "resumed", "--checkpoint-dir", str(resumed_ckpt), *flags))
    assert re.search(r"resumed from checkpoint \S+ckpt-0000000004 at step 4", caplog.text)
    assert _close(_weights(str(whole)), _weights(str(tmp_path / "resumed")), atol=1e-6)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tiny-shape", "hidden=4"], "'hidden=4': give name=positive integer"),
        (["--method", "qlora"], "invalid choice: 'qlora'"),
        (["--max-length", "0"], "--max-length: must be >= 1"),
    ],
)
def test_bad_flags_are_named_before_anything_runs(hf_finetune, flags, message, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        hf_finetune.parse_args(["--dataset", "d", "--model-dir", str(tmp_path / "m"), *flags])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_missing_base_model_is_named(hf_finetune, dataset, tmp_path) -> None:
    with pytest.raises(model_io.ModelLoadError, match="absent: no model folder there"):
        hf_finetune.main(_args(dataset, tmp_path / "m", "--model-uri", str(tmp_path / "absent")))
    assert not (tmp_path / "m").exists()


# --- slow: across replicas, and what is learned ----------------------------------------------------------------


def _pytorchjob(name: str, args: list[str], env: dict[str, str]):
    from kftrain.job import load_manifest

    def spec() -> dict:
        container = {"name": "pytorch", "image": "unused-locally", "args": args,
                     "command": ["python", "-m", "kftrain.programs.hf_finetune"],
                     "env": [{"name": k, "value": v} for k, v in env.items()]}  # fmt: skip
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return load_manifest({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
                          "spec": {"runPolicy": {"backoffLimit": 3},
                                   "pytorchReplicaSpecs": {"Master": spec(), "Worker": spec()}}})  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_replicas_lose_one_resume_and_train_what_one_process_does(hf_finetune, dataset, tmp_path) -> None:
    from kftrain.backends import LocalBackend, LocalConfig

    flags = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every-steps", "2",
             "--checkpoint-every-epochs", "0", "--method", "full", "--lora-dropout", "0"]  # fmt: skip
    fault = {"KFTRAIN_FAULT_AT_STEP": "5", "KFTRAIN_FAULT_RANK": "1", "KFTRAIN_FAULT_MARKER": str(tmp_path / "m")}
    (tmp_path / "tmp").mkdir()
    fault["TMPDIR"] = str(tmp_path / "tmp")  # the killed replica's embedded base folder is left there, not in /tmp
    out = io.StringIO()
    job = _pytorchjob("llm-crash", _args(dataset, tmp_path / "model", *flags), fault)
    result = LocalBackend(LocalConfig(out=out, grace_period_s=2)).run(job, timeout=800)
    log = out.getvalue()
    assert result.succeeded, result.describe() + log[-3000:]
    assert (tmp_path / "m").read_text() == "killed at step 5\n"
    assert "world size 2: global batch 16 = 2 process(es) x 1 micro-batch(es) of 8" in log
    resumed = [int(s) for s in re.findall(r"resumed from checkpoint \S+ at step (\d+)", log)]
    assert resumed and all(2 <= s <= 5 for s in resumed), resumed
    summaries = [json.loads(line[line.index("{") :]) for line in log.splitlines() if '"rank": 0, "loss"' in line]
    assert summaries and summaries[-1]["steps"] == 8
    hf_finetune.main(_args(dataset, tmp_path / "single", "--method", "full"))
    assert _close(_weights(str(tmp_path / "model")), _weights(str(tmp_path / "single")), atol=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_embedded_tiny_model_learns_the_synthetic_task(hf_finetune, tmp_path) -> None:
    """The embedded default's promise: the base model's exact match well under 0.1, the fine-tuned one's well over
    0.8 on held-out prompts (figures and time: bench/bench_llm_finetune.py)."""
    from kftrain.llm.evaluate import evaluate_language_model
    from kftrain.llm.instructions import read_split
    from kftrain.steps.prep_instructions import prepare_instructions

    dataset, out = str(tmp_path / "reverse"), tmp_path / "model"
    prepare_instructions(dataset, source="builtin:reverse")
    hf_finetune.main(["--dataset", dataset, "--model-dir", str(out), "--method", "full", "--lr", "3e-3",
                      "--epochs", "2", "--global-batch-size", "32", "--threads", "2"])  # fmt: skip
    test = read_split(dataset, "test")
    before = evaluate_language_model(*model_io.load_base(str(out)), test).metrics["exact_match"]
    tuned, tokenizer, _ = model_io.load_finetuned(str(out))
    after = evaluate_language_model(tuned, tokenizer, test).metrics["exact_match"]
    assert before < 0.1 < 0.8 < after, (before, after)

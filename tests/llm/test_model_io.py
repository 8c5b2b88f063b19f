"""Loading and writing language models: a folder, an S3 prefix, Trainer's /workspace/model, and the fine-tuning
program's own output (full weights, or a LoRA adapter with its base) read back through load_finetuned."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kftrain import storage
from kftrain.contract import WORKSPACE_ENV
from kftrain.llm import model_io
from testbed.llm import micro_model
from testbed.needs import requires

if TYPE_CHECKING:
    import torch

# PyTorch and PEFT are imported by the tests that run, not at collection (seconds each time: testbed/needs.py).
pytestmark = requires("peft", "torch")


def _logits(model, tok, text: str = "Reverse: abc") -> torch.Tensor:
    import torch

    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tok(text)["input_ids"]])).logits


def _lora(model):
    import torch
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # LoRA's B starts at zero: make the adapter change something
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    return peft_model


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    return micro_model(tmp_path / "tiny")


def test_s3_prefix_loads_like_the_local_folder(tiny_folder: Path, s3_env: str) -> None:
    import torch

    uri = storage.join(s3_env, "models", "tiny")
    storage.upload(tiny_folder, uri)
    local, tok = model_io.load_model(str(tiny_folder))
    remote, _ = model_io.load_model(uri)
    assert torch.equal(_logits(local, tok), _logits(remote, tok))


def test_model_initializer_layout(tiny_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    tiny_folder.rename(workspace / "model")
    monkeypatch.setenv(WORKSPACE_ENV, str(workspace))
    assert model_io.resolve("/workspace/model") == str(workspace / "model")
    model, _ = model_io.load_model("/workspace/model")
    assert model.config.model_type == "llama"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "model URI: empty"),
        ("hf://owner/name", "not downloaded here"),
        ("{tmp}/absent", "no model folder there"),
        ("{tmp}", "not a Hugging Face model folder"),
    ],
)
def test_what_is_not_a_model_is_named(uri: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(model_io.ModelLoadError, match=message):
        model_io.load_model(uri.format(tmp=tmp_path))


def test_full_fine_tune_round_trips(tiny_folder: Path, tmp_path: Path) -> None:
    import torch

    model, tok = model_io.load_model(str(tiny_folder))
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    out = str(tmp_path / "out")
    manifest = model_io.write_finetuned(out, model, tok, {"method": "full", "base_model": str(tiny_folder)})
    assert {model_io.INFO_FILE, "model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["files"])
    again, tok2, info = model_io.load_finetuned(out)
    assert info == {"format": model_io.FORMAT, "method": "full", "base_model": str(tiny_folder)}
    assert torch.equal(_logits(model, tok), _logits(again, tok2))


def test_lora_with_embedded_base_is_self_contained(tiny_folder: Path, tmp_path: Path, s3_env: str) -> None:
    import torch

    model, tok = model_io.load_model(str(tiny_folder))
    peft_model = _lora(model)
    expected = _logits(peft_model, tok)
    out = storage.join(s3_env, "finetuned")
    info = {"method": "lora", "base_model": "embedded:tiny"}
    manifest = model_io.write_finetuned(out, peft_model, tok, info, base_folder=tiny_folder)
    assert {"adapter/adapter_config.json", "base/model.safetensors", "base/config.json"} <= set(manifest["files"])
    again, tok2, got = model_io.load_finetuned(out)
    assert got["method"] == "lora" and type(again).__name__.startswith("Peft")
    assert torch.allclose(expected, _logits(again, tok2), atol=1e-5)
    merged, _, _ = model_io.load_finetuned(out, merge=True)
    assert type(merged).__name__ == "LlamaForCausalLM"
    assert torch.allclose(expected, _logits(merged, tok2), atol=1e-4)


def test_lora_on_a_named_base_loads_that_base(tiny_folder: Path, tmp_path: Path) -> None:
    import torch

    model, tok = model_io.load_model(str(tiny_folder))
    peft_model = _lora(model)
    out = str(tmp_path / "out")
    model_io.write_finetuned(out, peft_model, tok, {"method": "lora", "base_model": str(tiny_folder)})
    assert not (tmp_path / "out" / model_io.BASE_DIR).exists()
    again, tok2, _ = model_io.load_finetuned(out)
    assert torch.allclose(_logits(peft_model, tok), _logits(again, tok2), atol=1e-5)


def test_unknown_method_writes_nothing(tiny_folder: Path, tmp_path: Path) -> None:
    model, tok = model_io.load_model(str(tiny_folder))
    with pytest.raises(model_io.ModelLoadError, match="method 'qlora' is not one of lora, full"):
        model_io.write_finetuned(str(tmp_path / "out"), model, tok, {"method": "qlora"})
    assert not (tmp_path / "out").exists()


def test_a_plain_model_folder_is_not_a_finetuned_one(tiny_folder: Path) -> None:
    with pytest.raises(model_io.ModelLoadError, match=r"no kftrain-llm.json"):
        model_io.load_finetuned(str(tiny_folder))


def test_a_full_fine_tune_of_a_base_made_at_run_time_keeps_that_base(tiny_folder: Path, tmp_path: Path) -> None:
    import torch

    base, tok = model_io.load_model(str(tiny_folder))
    tuned, _ = model_io.load_model(str(tiny_folder))
    with torch.no_grad():
        tuned.lm_head.weight.mul_(1.5)
    out = str(tmp_path / "out")
    info = {"method": "full", "base_model": "embedded:tiny"}
    manifest = model_io.write_finetuned(out, tuned, tok, info, base_folder=tiny_folder)
    assert {"model.safetensors", "base/model.safetensors"} <= set(manifest["files"])
    again, _ = model_io.load_base(out)
    assert torch.equal(_logits(base, tok), _logits(again, tok))
    assert not torch.equal(_logits(tuned, tok), _logits(again, tok))


def test_the_base_of_a_lora_on_a_named_base_is_that_base(tiny_folder: Path, tmp_path: Path) -> None:
    import torch

    model, tok = model_io.load_model(str(tiny_folder))
    expected = _logits(model, tok)
    out = str(tmp_path / "out")
    model_io.write_finetuned(out, _lora(model), tok, {"method": "lora", "base_model": str(tiny_folder)})
    base, _ = model_io.load_base(out)
    assert torch.equal(expected, _logits(base, tok))

"""The embedded tiny model: its character tokenizer, its size, and a save that reloads as any model folder does."""

from __future__ import annotations

from pathlib import Path

from kftrain.llm import model_io, tiny
from testbed.llm import MICRO_SHAPE, micro_model, texts
from testbed.needs import requires

# PyTorch and Transformers are imported by the tests that run, not at collection (testbed/needs.py).
pytestmark = requires("transformers", "torch")


def test_tokenizer_round_trips_characters_with_bos_in_front() -> None:
    tok = tiny.build_tokenizer(texts())
    ids = tok("Reverse: abc\n", add_special_tokens=True)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == 1 + len("Reverse: abc\n")
    assert tok.decode(ids, skip_special_tokens=True) == "Reverse: abc\n"
    assert {tok.pad_token, tok.eos_token, tok.bos_token, tok.unk_token} == set(tiny.SPECIAL)


def test_tokenizer_vocabulary_comes_from_the_data() -> None:
    tok = tiny.build_tokenizer(["héllo"])
    assert tok.decode(tok("é", add_special_tokens=False)["input_ids"]) == "é"
    unknown = tok("ж", add_special_tokens=False)["input_ids"]
    assert unknown == [tok.unk_token_id]


def test_default_model_has_a_few_million_parameters() -> None:
    model = tiny.build_model(tiny.build_tokenizer(texts()))
    assert model.config.model_type == "llama"
    assert 1_000_000 <= tiny.parameter_count(model) <= 5_000_000


def test_same_seed_same_weights() -> None:
    import torch

    tok = tiny.build_tokenizer(texts())
    a, b = (tiny.build_model(tok, 3, **MICRO_SHAPE) for _ in range(2))
    c = tiny.build_model(tok, 4, **MICRO_SHAPE)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_saved_model_reloads_through_load_model(tmp_path: Path) -> None:
    import torch

    folder = micro_model(tmp_path / "tiny")
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    model, tok = model_io.load_model(str(folder))
    again, _ = model_io.load_model(str(folder))
    ids = torch.tensor([tok("Reverse: abc")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    assert tok.pad_token_id == tiny.SPECIAL.index(tiny.PAD)

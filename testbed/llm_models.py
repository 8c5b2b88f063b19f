"""Small language models and instruction datasets for the tests of evaluation and export, made in seconds with
nothing downloaded: the embedded tiny Llama (:mod:`kftrain.llm.tiny`) at a micro size, a few optimizer steps on the
synthetic task so the fine-tuned model differs from its base, written as the fine-tuning program writes its output
(:func:`kftrain.llm.model_io.write_finetuned`), and the dataset as prep publishes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kftrain.llm import instructions, model_io, synthetic, tiny
from kftrain.llm.instructions import Example
from kftrain.llm.prompts import encode_example

MICRO = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def examples(count: int = 16, seed: int = 0) -> list[Example]:
    return [Example(r["prompt"], r["response"]) for r in synthetic.rows("reverse", count, seed)]


def write_dataset(folder: Path, train: list[Example], test: list[Example]) -> str:
    """The instruction dataset prep publishes, at ``folder``; its URI."""
    instructions.publish(str(folder), instructions.Split(train, test, 0, 0), {"source": "tests"})
    return str(folder)


def fit(model: Any, tokenizer: Any, data: list[Example], steps: int) -> Any:
    """``steps`` full-batch AdamW steps on ``data`` (the response tokens' loss): enough to move a micro model."""
    import torch

    encoded = [encode_example(tokenizer, e.prompt, e.response, 64) for e in data]
    width = max(len(ids) for ids, _ in encoded)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in encoded])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in encoded])
    mask = (torch.arange(width)[None, :] < torch.tensor([len(i) for i, _ in encoded])[:, None]).long()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
    model.eval()
    return model


def write_model(folder: Path, data: list[Example], *, method: str = "lora", steps: int = 30) -> str:
    """A micro model fine-tuned on ``data`` by ``method`` (``lora``: an adapter beside its base in ``base/``;
    ``full``: the weights, naming the base folder ``folder``-base it started from), at ``folder``; its URI."""
    base = folder.parent / f"{folder.name}-base"
    tiny.save_tiny(base, [e.prompt + e.response for e in data], seed=0, **MICRO)
    model, tokenizer = model_io.load_model(str(base))
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], lora_dropout=0.0)
        model = get_peft_model(model, config)
    fit(model, tokenizer, data, steps)
    info = {"base_model": str(base), "method": method}
    model_io.write_finetuned(str(folder), model, tokenizer, info, base_folder=base if method == "lora" else None)
    return str(folder)


def finetuned_case(root: Path, *, method: str = "lora") -> tuple[str, str]:
    """(model URI, dataset URI): a micro model fine-tuned by ``method`` on 12 examples of the synthetic task, and
    the dataset of them (8 train, 4 test), under ``root``. Fitted on the test examples too, so the fine-tuned
    model's loss there is surely below its base's: these tests check the mechanism, not what generalizes."""
    data = examples(12)
    model = write_model(root / "model", data, method=method, steps=40)
    return model, write_dataset(root / "dataset", data[:8], data[8:])

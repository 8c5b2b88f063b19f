"""Tiny language models for tests: the embedded model at its smallest (a second to build), saved where asked."""

from __future__ import annotations

from pathlib import Path

from kftrain.llm import synthetic, tiny

# Far below the default's millions of parameters: the tests check loading and writing, not learning.
MICRO_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def texts(count: int = 50) -> list[str]:
    return [row["prompt"] + row["response"] for row in synthetic.rows("reverse", count, seed=0)]


def micro_model(folder: Path) -> Path:
    """A micro tiny model and its tokenizer saved into ``folder``."""
    return tiny.save_tiny(folder, texts(), seed=0, **MICRO_SHAPE)

"""Tiny language models for tests: the embedded model at the micro size of :mod:`testbed.llm_models` (a second to
build), saved where asked."""

from __future__ import annotations

from pathlib import Path

from kftrain.llm import synthetic, tiny
from testbed.llm_models import MICRO as MICRO_SHAPE

__all__ = ["MICRO_SHAPE", "micro_model", "texts"]


def texts(count: int = 50) -> list[str]:
    return [row["prompt"] + row["response"] for row in synthetic.rows("reverse", count, seed=0)]


def micro_model(folder: Path) -> Path:
    """A micro tiny model and its tokenizer saved into ``folder``."""
    return tiny.save_tiny(folder, texts(), seed=0, **MICRO_SHAPE)

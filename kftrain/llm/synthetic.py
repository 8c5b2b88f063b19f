"""Synthetic instruction tasks, seeded: what the embedded default trains on, with nothing downloaded.

Each task in :data:`BUILTIN` makes distinct ``{"prompt", "response"}`` rows from random short strings, so held-out
rows are strings the model never saw and exact match measures what it learned, not what it memorized. The default,
``reverse``, asks for a string of 3 to 7 letters backwards. Readers (the ``builtin:<name>`` source of the
instruction prep) call:

- ``rows(name, count, seed) -> list[dict]``: the rows, the same for the same arguments;
- ``write_task(folder, name, count, seed) -> str``: them as ``<folder>/<name>.jsonl`` (a local path or any URI
  :mod:`kftrain.storage` writes), its URI returned. An unknown name raises :class:`UnknownTask` naming the known.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from kftrain import storage
from kftrain.errors import KftrainError

DEFAULT_TASK = "reverse"
DEFAULT_ROWS = 2400


class UnknownTask(KftrainError):
    """A ``builtin:`` name that is no synthetic task."""


def _word(rng: random.Random, shortest: int = 3, longest: int = 7, letters: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(shortest, longest)))


def _reverse(rng: random.Random) -> tuple[str, str]:
    word = _word(rng)
    return f"Reverse: {word}", word[::-1]


def _upper(rng: random.Random) -> tuple[str, str]:
    word = _word(rng)
    return f"Uppercase: {word}", word.upper()


def _sort(rng: random.Random) -> tuple[str, str]:
    word = _word(rng)
    return f"Sort: {word}", "".join(sorted(word))


@dataclass(frozen=True)
class Task:
    """A synthetic task: what it asks, and how one (prompt, response) pair is drawn."""

    description: str
    draw: Callable[[random.Random], tuple[str, str]]


BUILTIN: dict[str, Task] = {
    "reverse": Task("a string of 3 to 7 lowercase letters, backwards", _reverse),
    "upper": Task("a string of 3 to 7 lowercase letters, in capitals", _upper),
    "sort": Task("the letters of a string of 3 to 7 lowercase letters, sorted", _sort),
}


def task(name: str) -> Task:
    if name not in BUILTIN:
        raise UnknownTask(f"builtin:{name}: no such synthetic task; known: {', '.join(sorted(BUILTIN))}")
    return BUILTIN[name]


def rows(name: str, count: int = DEFAULT_ROWS, seed: int = 0) -> list[dict[str, str]]:
    """``count`` rows of task ``name`` with distinct prompts, drawn from ``seed``."""
    draw = task(name).draw
    if count < 1:
        raise ValueError(f"builtin:{name}: the number of rows must be >= 1, got {count}")
    rng = random.Random(f"{name}:{seed}")
    seen: dict[str, str] = {}
    for _ in range(count * 20):  # far more draws than distinct prompts needed
        prompt, response = draw(rng)
        seen.setdefault(prompt, response)
        if len(seen) == count:
            return [{"prompt": p, "response": r} for p, r in seen.items()]
    raise ValueError(f"builtin:{name}: only {len(seen)} distinct prompts after {count * 20} draws; ask fewer rows")


def write_task(folder: str, name: str = DEFAULT_TASK, count: int = DEFAULT_ROWS, seed: int = 0) -> str:
    """Write :func:`rows` as JSON Lines to ``<folder>/<name>.jsonl``; its URI."""
    lines = "".join(json.dumps(row) + "\n" for row in rows(name, count, seed))
    uri = storage.join(folder, f"{name}.jsonl")
    with storage.open_uri(uri, "wb") as handle:
        handle.write(lines.encode())
    return uri

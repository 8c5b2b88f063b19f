"""Instruction data: one example is a prompt and the response to learn; the published dataset and how to read it.

A record is ``{"prompt": str, "response": str}`` or a chat ``{"messages": [{"role", "content"}, ...]}``, normalized
by :func:`example_of` (each problem an error naming the field, the file and the line) and :func:`render_messages`.
:func:`split` drops duplicates, then splits seeded, every example of one prompt on one side, so no test prompt is
a training prompt. :func:`publish` writes the layout readers use: ``train.jsonl``, ``test.jsonl`` (one
``{"prompt", "response"}`` object a line) and ``manifest.json`` in one :class:`kftrain.storage.ArtifactWriter`
(nothing is published on an error); :func:`read_split` reads a split back, checked against the artifact's marker.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kftrain import storage
from kftrain.data.dataset import DataValidationError

FORMAT = "kftrain-instructions/v1"
MANIFEST = "manifest.json"
SPLITS = ("train", "test")
FIELDS = ("prompt", "response")
ROLES = ("system", "user", "assistant")
ASSISTANT = "assistant"


@dataclass(frozen=True)
class Example:
    """One instruction example: the text the model is given and the text it should answer."""

    prompt: str
    response: str

    def key(self) -> tuple[str, str]:
        """What makes two examples the same one: their texts with runs of whitespace made one space."""
        return _normal(self.prompt), _normal(self.response)

    def chars(self) -> int:
        return len(self.prompt) + len(self.response)


def _normal(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Fields:
    """The names a source's records use for the prompt, the response and a chat's messages."""

    prompt: str = "prompt"
    response: str = "response"
    messages: str = "messages"


def render_messages(messages: Any, where: str, field: str = "messages") -> Example:
    """A chat as one example: the response is the last turn, which must be the assistant's; the prompt is every turn
    before it. A lone user turn is its content as written (so a one-turn chat and ``{"prompt", "response"}`` give
    the same example); more turns are each ``<Role>: <content>``, separated by a blank line. ``where`` (the file
    and line) and ``field`` name the record in an error."""
    if not isinstance(messages, list) or not messages:
        raise DataValidationError(f"{where}: {field!r} must be a non-empty list of {{role, content}} turns")
    turns = []
    for i, turn in enumerate(messages):
        at = f"{where}: {field}[{i}]"
        if not isinstance(turn, Mapping):
            raise DataValidationError(f"{at} is not an object with a role and a content")
        for key in ("role", "content"):
            if key not in turn:
                raise DataValidationError(f"{at}: no {key!r} field")
            if not isinstance(turn[key], str):
                raise DataValidationError(f"{at}.{key} is a {type(turn[key]).__name__}, not a string")
        if turn["role"] not in ROLES:
            raise DataValidationError(f"{at}.role {turn['role']!r} is not one of {', '.join(ROLES)}")
        turns.append((turn["role"], turn["content"]))
    if turns[-1][0] != ASSISTANT:
        raise DataValidationError(
            f"{where}: the last turn of {field!r} is the {turns[-1][0]}'s: a chat ends with the assistant's answer "
            "(the response to learn)"
        )
    before = turns[:-1]
    if not before:
        raise DataValidationError(f"{where}: {field!r} holds only the assistant's turn: nothing prompts it")
    if len(before) == 1 and before[0][0] == "user":
        return Example(before[0][1], turns[-1][1])
    return Example("\n\n".join(f"{role.capitalize()}: {content}" for role, content in before), turns[-1][1])


def example_of(record: Any, where: str, fields: Fields = Fields()) -> Example:
    """The example a source's record holds (``where``: its file and line), or an error naming the missing or
    mistyped field. Other fields are left out."""
    if not isinstance(record, Mapping):
        raise DataValidationError(f"{where}: a {type(record).__name__}, not an object of fields")
    if fields.messages in record and record[fields.messages] is not None:
        given = [f for f in (fields.prompt, fields.response) if record.get(f) is not None]
        if given:
            raise DataValidationError(f"{where}: both {fields.messages!r} and {given[0]!r}: give one form")
        return render_messages(record[fields.messages], where, fields.messages)
    texts = []
    for name in (fields.prompt, fields.response):
        value = record.get(name)
        if value is None:
            also = f", or {fields.messages!r}" if name == fields.prompt else ""
            raise DataValidationError(
                f"{where}: no {name!r} field (give {fields.prompt!r} and {fields.response!r}{also})"
            )
        if not isinstance(value, str):
            raise DataValidationError(f"{where}: {name!r} is a {type(value).__name__}, not a string")
        texts.append(value)
    return Example(texts[0], texts[1])


def problem(example: Example, max_chars: int) -> str:
    """Why an example cannot be learned (``"empty"``, ``"too_long"``), or ``""``; ``max_chars`` 0: no limit."""
    if not example.prompt.strip() or not example.response.strip():
        return "empty"
    if max_chars and example.chars() > max_chars:
        return "too_long"
    return ""


def describe(kind: str, example: Example, max_chars: int) -> str:
    """The message for an example with the problem ``kind``, naming what is wrong but never quoting it."""
    if kind == "empty":
        return f"an empty {'prompt' if not example.prompt.strip() else 'response'}"
    return f"{example.chars()} characters, over max_chars={max_chars}"


@dataclass
class Split:
    """The examples of each split, and how many duplicates were dropped before splitting."""

    train: list[Example]
    test: list[Example]
    duplicates: int
    shared_prompts: int  # examples whose prompt another example (with another response) has too


def check_test_fraction(test_fraction: float) -> None:
    if not 0 < test_fraction < 1:
        raise DataValidationError(f"test_fraction must be in (0, 1), got {test_fraction}")


def split(examples: Iterable[Example], test_fraction: float, seed: int) -> Split:
    """Duplicates (the same :meth:`Example.key`) dropped, the first kept; then the prompts shuffled from ``seed``
    and the first ``round(n * test_fraction)`` examples' worth taken for test. Examples of one prompt stay together:
    a test prompt is never a training prompt."""
    check_test_fraction(test_fraction)
    seen: set[tuple[str, str]] = set()
    groups: dict[str, list[Example]] = {}
    total = duplicates = 0
    for example in examples:
        key = example.key()
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        groups.setdefault(key[0], []).append(example)
        total += 1
    shared = sum(len(g) for g in groups.values() if len(g) > 1)
    order = list(groups)
    random.Random(seed).shuffle(order)
    wanted = round(total * test_fraction)
    test: list[Example] = []
    train: list[Example] = []
    for prompt in order:
        (test if len(test) < wanted else train).extend(groups[prompt])
    if not train or not test:
        raise DataValidationError(
            f"{total} distinct examples ({len(groups)} prompts): test_fraction={test_fraction} leaves an empty "
            f"split (train {len(train)}, test {len(test)}); give more examples or another test_fraction"
        )
    return Split(train, test, duplicates, shared)


def _jsonl(examples: Iterable[Example]) -> bytes:
    return "".join(
        json.dumps({"prompt": e.prompt, "response": e.response}, ensure_ascii=False) + "\n" for e in examples
    ).encode()


def publish(uri: str, parts: Split, details: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``parts`` at ``uri`` as the published layout, with ``details`` (source, warnings...) in the manifest;
    the manifest, also the artifact's metadata. Nothing is published when a write fails."""
    manifest = {
        **details,
        "format": FORMAT,
        "rows": {"train": len(parts.train), "test": len(parts.test)},
        "fields": list(FIELDS),
    }
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("train.jsonl", _jsonl(parts.train))
        writer.write_bytes("test.jsonl", _jsonl(parts.test))
        writer.write_json(MANIFEST, manifest)
        writer.metadata = manifest
    return manifest


def read_manifest(dataset_uri: str) -> dict[str, Any]:
    """The manifest of the instruction dataset at ``dataset_uri`` (a complete artifact of :func:`publish`)."""
    return _manifest(storage.ArtifactReader(dataset_uri))


def _manifest(reader: storage.ArtifactReader) -> dict[str, Any]:
    where = f"{reader.uri}/{MANIFEST}"
    if MANIFEST not in reader.files:
        raise DataValidationError(f"{reader.uri}: no {MANIFEST}: not an instruction dataset (prepare_instructions)")
    try:
        manifest = json.loads(reader.read_bytes(MANIFEST))
    except ValueError:
        raise DataValidationError(f"{where}: not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise DataValidationError(f"{where}: format {found!r}, not {FORMAT!r}: not an instruction dataset")
    return manifest


def read_split(dataset_uri: str, split: str) -> list[Example]:
    """The examples of ``split`` (``train`` or ``test``) of the instruction dataset at ``dataset_uri``: a local
    folder or an object-store prefix that :func:`publish` wrote (or Trainer's dataset initializer copied)."""
    if split not in SPLITS:
        raise DataValidationError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    reader = storage.ArtifactReader(dataset_uri)
    _manifest(reader)
    name = f"{split}.jsonl"
    out = []
    for number, line in enumerate(reader.read_bytes(name).decode("utf-8").splitlines(), 1):
        where = f"{reader.uri}/{name}: line {number}"
        try:
            record = json.loads(line)
        except ValueError:
            raise DataValidationError(f"{where}: not JSON") from None
        out.append(example_of(record, where))
    return out

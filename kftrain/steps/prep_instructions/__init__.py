"""Instruction prep: read instruction or chat data, check every example, split it, publish an instruction dataset.

Sources: :mod:`~kftrain.steps.prep_instructions.sources`. Each record becomes an example
(:func:`kftrain.llm.instructions.example_of`); a missing field or malformed JSON fails naming the field, file and
line. An empty or over-long example fails the same way (``invalid=refuse``) or is dropped and counted
(``invalid=drop``); duplicates are dropped and counted before the seeded split, which keeps every prompt on one
side. Everything is checked before anything is written; the layout is :func:`kftrain.llm.instructions.publish`'s.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from kftrain.data.dataset import DataValidationError
from kftrain.llm.instructions import (
    Example,
    Fields,
    check_test_fraction,
    describe,
    example_of,
    problem,
    publish,
    split,
)
from kftrain.redaction import userinfo
from kftrain.steps.prep_instructions import sources

log = logging.getLogger(__name__)

REFUSE, DROP = "refuse", "drop"
POLICIES = (REFUSE, DROP)
PROBLEMS = ("empty", "too_long")
SAID = {"empty": "empty", "too_long": "over-long", "duplicates": "duplicate"}  # each warning, in a log line
MAX_CHARS = 16000

__all__ = ["prepare_instructions"]


def prepare_instructions(
    output_uri: str,
    *,
    source: str,
    format: str = "auto",
    prompt_field: str = "prompt",
    response_field: str = "response",
    messages_field: str = "messages",
    max_chars: int = MAX_CHARS,
    invalid: str = REFUSE,
    test_fraction: float = 0.1,
    seed: int = 42,
) -> dict[str, Any]:
    """Prepare ``source`` at ``output_uri``; every input error is raised before anything is written there. The
    published manifest."""
    started = time.monotonic()
    fields = Fields(prompt_field, response_field, messages_field)
    check_inputs(source, fields, max_chars, invalid, test_fraction)
    dropped: Counter[str] = Counter()
    forms: Counter[str] = Counter()

    def examples(records: Iterator[tuple[str, Any]]) -> Iterator[Example]:
        for where, record in records:
            example = example_of(record, where, fields)
            forms["messages" if _chat(record, fields) else "prompt_response"] += 1
            kind = problem(example, max_chars)
            if not kind:
                yield example
            elif invalid == REFUSE:
                raise DataValidationError(
                    f"{where}: {describe(kind, example, max_chars)}; fix it, or set invalid=drop to drop and count "
                    "such examples"
                )
            else:
                dropped[kind] += 1

    with sources.opened(source, format) as opened:
        parts = split(examples(sources.records(opened)), test_fraction, seed)
    warnings = {**{kind: dropped[kind] for kind in PROBLEMS}, "duplicates": parts.duplicates}
    for kind, count in warnings.items():
        if count:
            log.warning("%s: %d %s example(s) dropped", source, count, SAID[kind])
    if parts.shared_prompts:
        log.info(
            "%s: %d examples share their prompt with another response (kept on one side)", source, parts.shared_prompts
        )
    details = {
        "source": source,
        "seed": seed,
        "test_fraction": test_fraction,
        "max_chars": max_chars,
        "forms": dict(forms),
        "warnings": warnings,
        "shared_prompts": parts.shared_prompts,
    }
    manifest = publish(output_uri, parts, details)
    log.info(
        "instruction dataset ready at %s in %.2fs: train %d, test %d",
        output_uri,
        time.monotonic() - started,
        len(parts.train),
        len(parts.test),
    )
    return manifest


def _chat(record: Any, fields: Fields) -> bool:
    return isinstance(record, Mapping) and record.get(fields.messages) is not None


def check_inputs(source: str, fields: Fields, max_chars: int, invalid: str, test_fraction: float) -> None:
    """The step's own inputs, each refused by name."""
    if any(userinfo(source)):  # it would be in every error and in the manifest; never quoted here
        raise DataValidationError(
            "source: a URI with credentials (user:password@) is refused: give them through the environment "
            "(AWS_ACCESS_KEY_ID..., HF_TOKEN)"
        )
    if invalid not in POLICIES:
        raise DataValidationError(f"invalid: {invalid!r} is not one of {', '.join(POLICIES)}")
    if max_chars < 0:
        raise DataValidationError(f"max_chars must be >= 0 (0: no limit), got {max_chars}")
    check_test_fraction(test_fraction)
    names = {"prompt_field": fields.prompt, "response_field": fields.response, "messages_field": fields.messages}
    for name, value in names.items():
        if not value.strip():
            raise DataValidationError(f"{name}: empty; name the records' field")
    if len(set(names.values())) < len(names):
        raise DataValidationError(f"prompt_field, response_field and messages_field must differ: {names}")

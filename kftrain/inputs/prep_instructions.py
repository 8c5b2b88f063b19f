"""The ``prepare_instructions`` component's inputs and outputs: the one table its signature is written from and its
step (:func:`kftrain.steps.prep_instructions.component.prepare_instructions_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import component_input, rows


@dataclass(frozen=True)
class PrepareInstructionsInputs:
    """What ``prepare_instructions`` is given: the source, how to read and check its examples, the split."""

    dataset: Any = rows.prepared(
        "instructions in train.jsonl and test.jsonl (one {prompt, response} object a line) and manifest.json"
    )
    source: str = component_input(
        "builtin:reverse",
        "builtin:reverse|upper|sort (synthetic tasks, nothing downloaded), hf://owner/name (Trainer's dataset "
        "initializer), or a JSON Lines or Parquet file, folder, glob or object-store prefix (s3://...).",
    )
    format: str = rows.file_format("jsonl or parquet")
    prompt_field: str = component_input("prompt", "The records' field holding the prompt.")
    response_field: str = component_input("response", "The records' field holding the response to learn.")
    messages_field: str = component_input(
        "messages",
        "The records' field holding a chat ([{role, content}...], ending with the assistant's turn), read when a "
        "record has it instead of a prompt and a response.",
    )
    max_chars: int = component_input(16000, "Longest example (prompt and response, in characters) kept; 0: no limit.")
    invalid: str = component_input(
        "refuse",
        "An empty or over-long example: refuse (the step fails naming its file and line) or drop (dropped and "
        "counted in the manifest's warnings).",
    )
    test_fraction: float = rows.test_fraction(0.1, "examples")
    seed: int = rows.split_seed("the examples of one prompt stay on one side")


OUTPUTS = (rows.dataset_uri_output("a training job's pods, evaluation"),)

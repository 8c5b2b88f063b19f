"""The one chat-free prompt format that training, evaluation and serving share, and how an example is tokenized.

A prompt is rendered as ``<prompt>\\n### Response:\\n`` and the model answers after it, ending with its tokenizer's
end-of-sequence token. :func:`encode_example` gives the token ids of prompt + response + EOS and the labels, with the
prompt's positions masked (``-100``) so the loss is the response's only; :func:`encode_prompt` gives what generation
starts from. The tokenizer's own special tokens (a BOS in front, as Llama's) are added with the prompt.
"""

from __future__ import annotations

from typing import Any

RESPONSE_MARK = "\n### Response:\n"
IGNORE_INDEX = -100  # what torch's cross entropy (and Transformers' causal LM loss) leaves out


def render(prompt: str) -> str:
    return f"{prompt}{RESPONSE_MARK}"


def encode_prompt(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids generation starts from (with the tokenizer's special tokens, e.g. BOS)."""
    return list(tokenizer(render(prompt), add_special_tokens=True)["input_ids"])


def encode_example(tokenizer: Any, prompt: str, response: str, max_length: int) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one example, cut at ``max_length`` tokens; labels are -100 on the prompt."""
    head = encode_prompt(tokenizer, prompt)
    tail = list(tokenizer(response, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        tail.append(int(tokenizer.eos_token_id))
    ids = (head + tail)[:max_length]
    labels = ([IGNORE_INDEX] * len(head) + tail)[:max_length]
    return ids, labels

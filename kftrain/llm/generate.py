"""The stated generation config and generation with it: what evaluation answers held-out prompts with, what an export
writes as its ``generation_config.json`` and what the export's reload check answers a prompt with.

Decoding is greedy (``do_sample=False``, one beam) up to ``max_new_tokens``, so an evaluation is reproducible and its
config is recorded beside its metrics. A prompt is encoded as training encodes it
(:func:`kftrain.llm.prompts.encode_prompt`); the answer is the text of the tokens generated after it, up to the end
token. Generation and evaluation's loss run in :func:`inference`: no autograd, few intra-op threads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from kftrain.errors import KftrainError
from kftrain.llm.prompts import encode_prompt

# The training programs' default (--threads, kftrain.programs.common). A tiny model's matrices are too small to
# share: on two loaded cores, 2 threads made one forward pass of the embedded model 7x slower than 1
# (bench/llm_evaluate.md).
INFERENCE_THREADS = 1


@contextmanager
def inference(threads: int = INFERENCE_THREADS) -> Iterator[None]:
    """Torch's inference mode with ``threads`` intra-op threads; the thread count is restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            yield
    finally:
        torch.set_num_threads(before)


class GenerationError(KftrainError):
    """A generation setting out of range, or a model that cannot generate."""


@dataclass(frozen=True)
class GenerationSettings:
    """How held-out prompts are answered: greedy decoding, at most ``max_new_tokens`` new tokens."""

    max_new_tokens: int = 32
    do_sample: bool = False
    num_beams: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= 4096:
            raise GenerationError(f"max_new_tokens: {self.max_new_tokens} is not between 1 and 4096")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def config(self, tokenizer: Any) -> Any:
        """The Transformers ``GenerationConfig`` of these settings, with the tokenizer's end and padding tokens."""
        from transformers import GenerationConfig

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=self.do_sample,
            num_beams=self.num_beams,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=pad,
            bos_token_id=tokenizer.bos_token_id,
        )


def generate(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: GenerationSettings, *, batch_size: int = 16
) -> list[str]:
    """The model's answer to each prompt with ``settings``: the text of the new tokens, special tokens dropped."""
    import torch

    config = settings.config(tokenizer)
    answers: list[str] = []
    model.eval()
    with inference():
        for start in range(0, len(prompts), batch_size):
            encoded = [encode_prompt(tokenizer, p) for p in prompts[start : start + batch_size]]
            width = max(len(ids) for ids in encoded)
            # Padded on the left: every prompt of the batch ends where generation starts.
            ids = [[config.pad_token_id] * (width - len(i)) + i for i in encoded]
            mask = [[0] * (width - len(i)) + [1] * len(i) for i in encoded]
            out = model.generate(
                input_ids=torch.tensor(ids, device=model.device),
                attention_mask=torch.tensor(mask, device=model.device),
                generation_config=config,
            )
            answers += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return answers

"""The stated generation config: greedy, bounded, and the same answers one prompt at a time as in a padded batch."""

from __future__ import annotations

import pytest

from kftrain.llm import tiny
from kftrain.llm.generate import GenerationError, GenerationSettings, generate, inference
from testbed.llm_models import MICRO, examples


def test_the_config_is_greedy_with_the_tokenizers_end_and_padding():
    data = examples(2)
    tokenizer = tiny.build_tokenizer([e.prompt for e in data])
    config = GenerationSettings(max_new_tokens=5).config(tokenizer)
    assert (config.do_sample, config.num_beams, config.max_new_tokens) == (False, 1, 5)
    assert (config.eos_token_id, config.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert GenerationSettings(max_new_tokens=5).as_dict() == {"max_new_tokens": 5, "do_sample": False, "num_beams": 1}


@pytest.mark.parametrize("tokens", [0, -1, 5000])
def test_max_new_tokens_out_of_range_is_named(tokens):
    with pytest.raises(GenerationError, match=f"max_new_tokens: {tokens} is not between 1 and 4096"):
        GenerationSettings(max_new_tokens=tokens)


def test_a_padded_batch_answers_as_each_prompt_alone():
    data = examples(5)  # prompts of 3 to 7 letters: unequal lengths, padded on the left in one batch
    tokenizer = tiny.build_tokenizer([e.prompt + e.response for e in data])
    model = tiny.build_model(tokenizer, seed=3, **MICRO)
    settings = GenerationSettings(max_new_tokens=6)
    prompts = [e.prompt for e in data]
    batched = generate(model, tokenizer, prompts, settings, batch_size=5)
    alone = [generate(model, tokenizer, [p], settings)[0] for p in prompts]
    assert batched == alone
    assert all(0 < len(a) <= 6 for a in alone)  # one character per token; the random model never ends at once
    assert generate(model, tokenizer, prompts[:1], settings) == alone[:1]  # greedy: the same again


def test_inference_is_without_autograd_on_its_threads_and_restores_the_thread_count():
    import torch

    before = torch.get_num_threads()
    with inference(threads=1):
        assert torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before and torch.is_grad_enabled()

"""The embedded default model: a tiny Llama-architecture decoder and a character tokenizer, made at run time.

Nothing is downloaded: :func:`build_tokenizer` makes a character-level tokenizer from the training texts (plus
printable ASCII) with the ``tokenizers`` library, wrapped as a Transformers fast tokenizer with ``<pad>``, ``<s>``,
``</s>`` and ``<unk>`` (``<s>`` added in front like Llama's); :func:`build_model` makes a randomly initialized
``LlamaForCausalLM`` of a few million parameters for it. :func:`save_tiny` writes both with ``save_pretrained``, so
they are loaded through :func:`kftrain.llm.model_io.load_model` like any Hugging Face model folder.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL = (PAD, BOS, EOS, UNK)
# A few million parameters: learns the synthetic task in about a minute on two CPU cores.
DEFAULT_SHAPE: dict[str, int] = {
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 6,
    "num_key_value_heads": 6,
    "max_position_embeddings": 256,
}


def vocabulary(texts: Iterable[str]) -> list[str]:
    """The tokens: the special ones, then every character of printable ASCII and of ``texts``, in a stable order."""
    chars = set(string.printable) | {c for text in texts for c in text}
    return [*SPECIAL, *sorted(chars - set(SPECIAL))]


def build_tokenizer(texts: Iterable[str]) -> Any:
    """A character-level ``PreTrainedTokenizerFast`` for ``texts``: one token per character, ``<s>`` in front."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(vocabulary(texts))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # characters back to the text, no separator
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="right"
    )


def build_model(tokenizer: Any, seed: int = 0, **shape: int) -> Any:
    """A randomly initialized ``LlamaForCausalLM`` sized for ``tokenizer`` (``shape`` overrides
    :data:`DEFAULT_SHAPE`), the same weights for the same seed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fields: dict[str, Any] = {**DEFAULT_SHAPE, **shape}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        **fields,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_tiny(folder: str | Path, texts: Iterable[str], seed: int = 0, **shape: int) -> Path:
    """Make the tiny model and tokenizer for ``texts`` and save both into the local ``folder`` (safetensors)."""
    target = Path(folder)
    tokenizer = build_tokenizer(texts)
    model = build_model(tokenizer, seed, **shape)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def parameter_count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))

"""Tokenized instruction examples and the padded tensors of a micro-batch, for causal-LM training.

:class:`Encoded` holds every example's token ids and labels (the prompt's masked, see
:func:`kftrain.llm.prompts.encode_example`); :meth:`Encoded.batch` pads the chosen rows to their longest (right
padding, the attention mask zero there, labels -100), so a micro-batch costs its own length, not the longest
example's. :meth:`Encoded.targets` counts the response tokens of rows, which weigh the loss across micro-batches
and processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kftrain.llm.prompts import IGNORE_INDEX, encode_example


@dataclass
class Encoded:
    """Every example's (input_ids, labels), and how many were cut at ``max_length``."""

    ids: list[list[int]]
    labels: list[list[int]]
    pad_id: int
    truncated: int

    @classmethod
    def of(cls, tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int) -> Encoded:
        ids, labels, truncated = [], [], 0
        for prompt, response in pairs:
            i, lab = encode_example(tokenizer, prompt, response, 1 << 30)
            truncated += len(i) > max_length
            ids.append(i[:max_length])
            labels.append(lab[:max_length])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls(ids, labels, int(pad), truncated)

    def __len__(self) -> int:
        return len(self.ids)

    def targets(self, rows: np.ndarray) -> int:
        """The response tokens (labels that count in the loss) of ``rows``."""
        return sum(sum(1 for t in self.labels[int(r)] if t != IGNORE_INDEX) for r in rows)

    def tokens(self, rows: np.ndarray) -> int:
        """All tokens (prompt and response) of ``rows``."""
        return sum(len(self.ids[int(r)]) for r in rows)

    def batch(self, rows: np.ndarray, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask`` and ``labels`` of ``rows``, right-padded to the longest of them."""
        width = max(len(self.ids[int(r)]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for n, r in enumerate(rows):
            row_ids, row_labels = self.ids[int(r)], self.labels[int(r)]
            ids[n, : len(row_ids)] = torch.tensor(row_ids)
            labels[n, : len(row_labels)] = torch.tensor(row_labels)
            mask[n, : len(row_ids)] = 1
        out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        return {k: v.to(device) for k, v in out.items()} if device is not None else out


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The summed cross entropy of every labelled next token (position t predicts label t+1; -100 left out)."""
    shifted = logits[:, :-1, :].reshape(-1, logits.shape[-1]).float()
    return torch.nn.functional.cross_entropy(
        shifted, labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )

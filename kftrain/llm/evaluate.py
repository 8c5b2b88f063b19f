"""A language model's metrics on held-out instruction examples: evaluation loss and perplexity over the response
tokens only, and task metrics of its greedy answers (:mod:`kftrain.llm.generate`) against the expected responses.

Task metrics (:data:`TASK_METRICS`; all are computed, the user names the headline one) are each the mean over the
examples of a score in [0, 1], compared after stripping surrounding whitespace: ``exact_match`` (the answer is the
response), ``prefix_match`` (the answer starts with it), ``contains`` (the response is somewhere in the answer),
``token_f1`` (F1 of the whitespace-separated words, as SQuAD scores). Loss and perplexity are lower-is-better; the
quality gate knows every one of them (:mod:`kftrain.steps.evaluate.gate`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.errors import EvaluationError
from kftrain.llm.generate import GenerationSettings, generate, inference
from kftrain.llm.prompts import IGNORE_INDEX, encode_example


def _exact(answer: str, response: str) -> float:
    return float(answer.strip() == response.strip())


def _prefix(answer: str, response: str) -> float:
    return float(answer.strip().startswith(response.strip()))


def _contains(answer: str, response: str) -> float:
    return float(response.strip() in answer)


def _token_f1(answer: str, response: str) -> float:
    got, want = answer.split(), response.split()
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if not common:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


TASK_METRICS: dict[str, Callable[[str, str], float]] = {
    "exact_match": _exact,
    "prefix_match": _prefix,
    "contains": _contains,
    "token_f1": _token_f1,
}
LOSS_METRICS = ("eval_loss", "perplexity")


@dataclass(frozen=True)
class Generation:
    """One held-out prompt, its expected response, the model's answer and the headline task metric's score of it."""

    prompt: str
    response: str
    answer: str
    score: float


@dataclass
class LanguageEvaluation:
    """A language model on one split: its metrics, how it answered, and the settings it answered with."""

    split: str
    rows: int
    response_tokens: int
    task_metric: str
    settings: GenerationSettings
    metrics: dict[str, float]
    generations: list[Generation] = field(default_factory=list)


def check_task_metric(name: str) -> str:
    """``name`` if it is a task metric, else one error naming the input and the metrics there are."""
    if name not in TASK_METRICS:
        raise EvaluationError(f"task_metric: {name!r} is not a task metric (choose from {', '.join(TASK_METRICS)})")
    return name


def response_loss(model: Any, tokenizer: Any, examples: Sequence[Any], *, batch_size: int = 16) -> tuple[float, int]:
    """The mean cross-entropy per response token (the prompt's tokens are not counted) and how many tokens."""
    import torch

    total, tokens = 0.0, 0
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    longest = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)  # cut as training cuts
    with inference():
        for start in range(0, len(examples), batch_size):
            batch = examples[start : start + batch_size]
            encoded = [encode_example(tokenizer, e.prompt, e.response, longest) for e in batch]
            width = max(len(ids) for ids, _ in encoded)
            ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in encoded], device=model.device)
            labels = torch.tensor(
                [lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in encoded], device=model.device
            )
            mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in encoded], device=model.device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
            )
            total += float(loss)
            tokens += int((target != IGNORE_INDEX).sum())
    if not tokens:
        raise EvaluationError("the examples have no response tokens to compute a loss on")
    return total / tokens, tokens


def evaluate_language_model(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Any],
    *,
    split: str = "test",
    task_metric: str = "exact_match",
    settings: GenerationSettings | None = None,
    batch_size: int = 16,
) -> LanguageEvaluation:
    """Loss, perplexity and the task metric of ``model`` on ``examples`` (``Example(prompt, response)``)."""
    check_task_metric(task_metric)
    settings = settings or GenerationSettings()
    if not examples:
        raise EvaluationError(f"the {split} split has no examples")
    loss, tokens = response_loss(model, tokenizer, examples, batch_size=batch_size)
    answers = generate(model, tokenizer, [e.prompt for e in examples], settings, batch_size=batch_size)
    headline = TASK_METRICS[task_metric]
    pairs = list(zip(examples, answers, strict=True))
    generations = [Generation(e.prompt, e.response, a, headline(a, e.response)) for e, a in pairs]
    metrics = {name: sum(score(a, e.response) for e, a in pairs) / len(pairs) for name, score in TASK_METRICS.items()}
    metrics["eval_loss"] = loss
    metrics["perplexity"] = math.exp(min(loss, 700.0))  # exp(700) is near float's largest
    return LanguageEvaluation(split, len(examples), tokens, task_metric, settings, metrics, generations)

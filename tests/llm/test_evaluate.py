"""Language-model metrics: the loss over response tokens only (Transformers' own loss of the same labels), perplexity,
and every task metric of the answers."""

from __future__ import annotations

import math

import pytest

from kftrain.errors import EvaluationError
from kftrain.llm import tiny
from kftrain.llm.evaluate import TASK_METRICS, check_task_metric, evaluate_language_model, response_loss
from kftrain.llm.generate import GenerationSettings
from kftrain.llm.prompts import IGNORE_INDEX, encode_example
from kftrain.steps.evaluate import gate
from testbed.llm_models import MICRO, examples


@pytest.fixture(scope="module")
def micro():
    data = examples(6)
    tokenizer = tiny.build_tokenizer([e.prompt + e.response for e in data])
    return tiny.build_model(tokenizer, seed=1, **MICRO), tokenizer, data


@pytest.mark.parametrize(
    ("name", "answer", "response", "score"),
    [
        ("exact_match", " olleh\n", "olleh", 1.0),
        ("exact_match", "olleh!", "olleh", 0.0),
        ("prefix_match", "olleh and more", "olleh", 1.0),
        ("prefix_match", "x olleh", "olleh", 0.0),
        ("contains", "it is olleh.", "olleh", 1.0),
        ("contains", "hello", "olleh", 0.0),
        ("token_f1", "the cat sat", "the cat", 0.8),  # precision 2/3, recall 1
        ("token_f1", "", "", 1.0),
        ("token_f1", "dog", "the cat", 0.0),
    ],
)
def test_each_task_metric(name, answer, response, score):
    assert TASK_METRICS[name](answer, response) == pytest.approx(score)


def test_the_gate_knows_every_metric_evaluation_computes():
    assert set(gate.METRICS[gate.LANGUAGE]) == {*TASK_METRICS, "eval_loss", "perplexity"}
    assert {"eval_loss", "perplexity"} <= gate.LOWER_IS_BETTER
    decision = gate.quality_gate({"perplexity": 2.5}, "perplexity", 3.0, {"perplexity": 9.0})
    assert decision.passed and "<= 3.0" in decision.reason


def test_an_unknown_task_metric_is_named_with_the_known_ones():
    with pytest.raises(EvaluationError, match=r"task_metric: 'bleu' is not a task metric .*exact_match, prefix_match"):
        check_task_metric("bleu")


def test_the_loss_counts_response_tokens_only(micro):
    import torch

    model, tokenizer, data = micro
    loss, tokens = response_loss(model, tokenizer, data, batch_size=4)  # padded batches of unequal lengths
    expected_total, expected_tokens = 0.0, 0
    for e in data:  # one example at a time, Transformers' causal LM loss of the same labels
        ids, labels = encode_example(tokenizer, e.prompt, e.response, 64)
        n = sum(1 for label in labels[1:] if label != IGNORE_INDEX)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
        expected_total += float(out.loss) * n
        expected_tokens += n
    assert tokens == expected_tokens == sum(len(e.response) + 1 for e in data)  # a character each, and the end
    assert loss == pytest.approx(expected_total / expected_tokens, rel=1e-4)


def test_perplexity_is_the_exponential_of_the_loss_and_every_metric_is_computed(micro):
    model, tokenizer, data = micro
    result = evaluate_language_model(
        model, tokenizer, data, task_metric="token_f1", settings=GenerationSettings(max_new_tokens=3)
    )
    assert result.metrics["perplexity"] == pytest.approx(math.exp(result.metrics["eval_loss"]))
    assert set(result.metrics) == {*TASK_METRICS, "eval_loss", "perplexity"}
    assert [g.prompt for g in result.generations] == [e.prompt for e in data] and result.task_metric == "token_f1"
    assert all(len(g.answer) <= 3 for g in result.generations)  # one character a token, 3 tokens at most


def test_an_empty_split_is_refused(micro):
    model, tokenizer, _ = micro
    with pytest.raises(EvaluationError, match="the test split has no examples"):
        evaluate_language_model(model, tokenizer, [])

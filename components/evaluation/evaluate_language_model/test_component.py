"""evaluate_language_model scores a fine-tuned language model and its base on held-out instructions: KFP Metrics,
a Markdown and an HTML report with sample generations, and the quality gate's verdict (``passed``, ``score``)."""

# No `from __future__ import annotations`: KFP reads the pipeline's parameter types from its annotations.

import math
from pathlib import Path

import pytest
from kfp import dsl

from kftrain_components.evaluation.evaluate_language_model.component import evaluate_language_model
from testbed import component_calls
from testbed.llm_models import examples, write_model
from testbed.pipeline_harness import executor_output, step


def outputs(tmp_path: Path) -> dict[str, dsl.Artifact]:
    """The output artifacts KFP hands the step, each at its own URI."""
    kinds = {"metrics": dsl.Metrics, "report": dsl.Markdown, "html_report": dsl.HTML}
    return {name: kind(name=name, uri=str(tmp_path / name), metadata={}) for name, kind in kinds.items()}


def evaluate(tmp_path: Path, model_uri: str, dataset_uri: str, **inputs) -> tuple[tuple, dict[str, dsl.Artifact]]:
    out = outputs(tmp_path)
    model = dsl.Model(name="model", uri=model_uri, metadata={})
    result = evaluate_language_model.python_func(model=model, dataset_uri=dataset_uri, **inputs, **out)
    return result, out


def test_loss_perplexity_and_answers_before_and_after_with_the_stated_config(tmp_path, finetuned_llm):
    result, out = evaluate(tmp_path, *finetuned_llm, max_new_tokens=6, gate_metric="eval_loss", gate_threshold=100.0)
    scores = out["metrics"].metadata
    assert scores["perplexity"] == pytest.approx(math.exp(scores["eval_loss"]), rel=1e-4)
    assert scores["eval_loss"] < scores["base_eval_loss"]  # fitted on these examples: below its base
    assert {"exact_match", "token_f1", "base_exact_match", "rows"} <= set(scores) and scores["rows"] == 4
    assert (scores["max_new_tokens"], scores["greedy"]) == (6, 1)  # the generation config, recorded
    assert result[0] is True and result[1] == pytest.approx(scores["eval_loss"], abs=1e-5)
    html = Path(out["html_report"].path).read_text()
    assert "max_new_tokens=6" in html and 'id="samples"' in html and "Reverse: " in html
    assert "| eval_loss |" in Path(out["report"].path).read_text()


def test_the_gate_fails_below_its_threshold(tmp_path, finetuned_llm):
    result, out = evaluate(tmp_path, *finetuned_llm, max_new_tokens=4, compare_base=False, gate_threshold=0.99)
    assert result == (False, out["metrics"].metadata["exact_match"])  # exact_match: the micro model is no good
    assert "base_eval_loss" not in out["metrics"].metadata


def test_a_fully_fine_tuned_model_is_compared_with_the_base_it_names(tmp_path, finetuned_llm):
    full = write_model(tmp_path / "full", examples(12), method="full", steps=8)  # kftrain-llm.json names its base
    (tmp_path / "out").mkdir()
    _, out = evaluate(tmp_path / "out", full, finetuned_llm[1], max_new_tokens=2, gate_threshold=0.0)
    scores = out["metrics"].metadata
    assert scores["eval_loss"] < scores["base_eval_loss"]


def test_a_given_base_model_is_the_one_compared(tmp_path, finetuned_llm):
    base = str(Path(finetuned_llm[0]) / "base")  # the LoRA model's own base, given as a plain model folder
    (tmp_path / "given").mkdir()
    (tmp_path / "off").mkdir()
    _, given = evaluate(tmp_path / "given", *finetuned_llm, max_new_tokens=2, base_model_uri=base)
    _, off = evaluate(tmp_path / "off", *finetuned_llm, max_new_tokens=2)  # the adapter turned off instead
    assert given["metrics"].metadata["base_eval_loss"] == pytest.approx(off["metrics"].metadata["base_eval_loss"])


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"task_metric": "bleu"}, "task_metric"),
        ({"gate_metric": "accuracy"}, "gate_metric"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_a_bad_input_fails_the_step_before_anything_is_written(tmp_path, finetuned_llm, capsys, inputs, named):
    component_calls.refused_before_writing(
        lambda: evaluate(tmp_path, *finetuned_llm, **inputs), tmp_path, capsys, named
    )


def test_a_model_folder_without_its_files_is_one_error(tmp_path, finetuned_llm, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as ended:
        evaluate(tmp_path / "out", str(tmp_path / "empty"), finetuned_llm[1])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "kftrain-llm.json" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@dsl.pipeline
def evaluate_imported(model_uri: str, dataset_uri: str):
    """evaluate_language_model on a model already stored (as an importer hands it over) and a dataset by its URI."""
    model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
    evaluate_language_model(model=model.output, dataset_uri=dataset_uri, max_new_tokens=4, gate_threshold=0.0)


@pytest.mark.slow  # a step process that imports torch, Transformers and PEFT: about 20 s on 2 busy cores
def test_a_local_run_outputs_the_verdict_and_the_metrics(kfp_local, finetuned_llm):
    evaluate_imported(model_uri=finetuned_llm[0], dataset_uri=finetuned_llm[1])
    (run,) = kfp_local.iterdir()
    out = executor_output(step(run, "evaluate-language-model"))
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert out["parameterValues"]["score"] == pytest.approx(metrics["exact_match"], abs=1e-6)
    assert metrics["eval_loss"] < metrics["base_eval_loss"]

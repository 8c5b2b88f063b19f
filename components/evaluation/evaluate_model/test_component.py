"""evaluate_model scores a model on a held-out split: KFP Metrics, ClassificationMetrics, a Markdown and an HTML
report, and the quality gate's verdict (``passed``, ``score``) the pipeline branches on."""

# No `from __future__ import annotations`: KFP reads the pipeline's parameter types from its annotations.

from pathlib import Path

import pytest
from kfp import dsl

from kftrain_components.evaluation.evaluate_model.component import evaluate_model
from testbed.pipeline_harness import executor_output, step


def outputs(tmp_path: Path) -> dict[str, dsl.Artifact]:
    """The output artifacts KFP hands the step, each at its own URI."""
    kinds = {
        "metrics": dsl.Metrics,
        "classification_metrics": dsl.ClassificationMetrics,
        "report": dsl.Markdown,
        "html_report": dsl.HTML,
    }
    return {name: kind(name=name, uri=str(tmp_path / name), metadata={}) for name, kind in kinds.items()}


@pytest.mark.parametrize(("threshold", "passed"), [(0.9, True), (0.999, False)])
def test_scores_reports_and_the_gate(tmp_path, breast_cancer, threshold, passed):
    model_uri, dataset_uri, _ = breast_cancer
    out = outputs(tmp_path)
    result = evaluate_model.python_func(
        model=dsl.Model(name="model", uri=model_uri, metadata={}),
        dataset_uri=dataset_uri,
        gate_threshold=threshold,
        **out,
    )
    accuracy = out["metrics"].metadata["accuracy"]
    assert accuracy > 0.9 and result[0] is passed  # (passed, score), as KFP reads the outputs
    assert result[1] == pytest.approx(accuracy, abs=1e-6)  # the metric, unrounded
    assert len(out["classification_metrics"].metadata["confusionMatrix"]["rows"]) == 2
    assert "accuracy" in Path(out["report"].path).read_text()
    assert 'id="confusion-matrix"' in Path(out["html_report"].path).read_text()


@dsl.pipeline
def evaluate_imported(model_uri: str, dataset_uri: str):
    """evaluate_model on a model already stored (as an importer hands it over) and a dataset by its URI."""
    model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model)
    evaluate_model(model=model.output, dataset_uri=dataset_uri, gate_threshold=0.9)


def test_a_local_run_outputs_the_verdict_and_the_metrics(kfp_local, breast_cancer):
    model_uri, dataset_uri, _ = breast_cancer
    evaluate_imported(model_uri=model_uri, dataset_uri=dataset_uri)
    (run,) = kfp_local.iterdir()
    out = executor_output(step(run, "evaluate-model"))
    assert out["parameterValues"]["passed"] is True
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert out["parameterValues"]["score"] == pytest.approx(metrics["accuracy"], abs=1e-6) and metrics["accuracy"] > 0.9

"""The language-model evaluation step with MLflow tracking on: the metrics (the base's beside), the gate's and the
generation config's tags, the reports and every generation in the task's run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl

from kftrain.steps.evaluate_llm.component import evaluate_llm_component
from testbed.mlflow_server import kfp_task_run


@pytest.fixture
def tracked_run(mlflow_server: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """(client, run id): the task's run on a real tracking server, named to the step as KFP 2.17's driver names it."""
    client = mlflow_server.client()
    env = kfp_task_run(client, mlflow_server.uri, "task")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return client, env["MLFLOW_RUN_ID"]


def test_the_run_has_the_metrics_the_gate_the_config_and_the_generations(tmp_path, finetuned_llm, tracked_run):
    client, run_id = tracked_run
    metrics = dsl.Metrics(name="metrics", uri=str(tmp_path / "metrics"), metadata={})
    passed, score = evaluate_llm_component(
        model=dsl.Model(name="model", uri=finetuned_llm[0], metadata={}),
        dataset_uri=finetuned_llm[1],
        metrics=metrics,
        report=dsl.Markdown(name="report", uri=str(tmp_path / "report"), metadata={}),
        html_report=dsl.HTML(name="html_report", uri=str(tmp_path / "html"), metadata={}),
        split="test",
        task_metric="contains",
        max_new_tokens=3,
        max_examples=3,
        samples=2,
        compare_base=True,
        base_model_uri="",
        gate_metric="perplexity",
        gate_threshold=1000.0,
        batch_size=2,
    )
    run = client.get_run(run_id).data
    assert run.metrics["perplexity"] == pytest.approx(metrics.metadata["perplexity"], rel=1e-5) == pytest.approx(score)
    assert run.metrics["base_perplexity"] > run.metrics["perplexity"] and run.metrics["rows"] == 3
    assert passed and run.tags["kftrain.gate.passed"] == "true" and run.tags["kftrain.gate.metric"] == "perplexity"
    assert json.loads(run.tags["kftrain.evaluation.generation"]) == {
        "max_new_tokens": 3,
        "do_sample": False,
        "num_beams": 1,
    }
    generations = json.loads(
        Path(client.download_artifacts(run_id, "evaluation/generations.json", str(tmp_path))).read_text()
    )
    assert len(generations) == 3 and {"prompt", "response", "answer", "score", "base_answer"} <= set(generations[0])
    assert [a.path for a in client.list_artifacts(run_id, "evaluation")] == [
        "evaluation/generations.json",
        "evaluation/report.html",
        "evaluation/report.md",
    ]

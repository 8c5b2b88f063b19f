"""The evaluation and export steps' functions called as KFP calls them, for tests of what they refuse: each
artifact a path under one folder, every input but the model, the dataset and the gate metric at a plain value."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace


def artifact(folder: Path, name: str) -> SimpleNamespace:
    """An artifact as KFP hands it to a step: its uri and path are ``folder / name``."""
    return SimpleNamespace(uri=str(folder / name), metadata={}, path=str(folder / name))


def evaluate(folder: Path, dataset_uri: str, *, model: str = "model", gate_metric: str = "auto") -> None:
    """The evaluation step on ``dataset_uri``, its reports written as ``r.md`` and ``r.html`` under ``folder``."""
    from kftrain.steps.evaluate.component import evaluate_component  # imported when called: numpy, pyarrow

    evaluate_component(
        model=artifact(folder, model),
        dataset_uri=dataset_uri,
        metrics=None,
        classification_metrics=None,
        report=artifact(folder, "r.md"),
        html_report=artifact(folder, "r.html"),
        split="test",
        gate_metric=gate_metric,
        gate_threshold=0.0,
        baseline_model_uri="",
        batch_rows=10,
    )


def export(folder: Path, dataset_uri: str) -> None:
    """The export step of ``folder / "model"`` on ``dataset_uri``, writing ``out`` and ``isvc`` under ``folder``."""
    from kftrain.steps.export.component import export_component

    export_component(
        model=artifact(folder, "model"),
        dataset_uri=dataset_uri,
        exported=artifact(folder, "out"),
        inference_service=artifact(folder, "isvc"),
        model_name="m",
        targets=[],
        verify_rows=0,
    )

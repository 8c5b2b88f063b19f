"""The stages every training pipeline shares, wired once.

Called inside a ``@dsl.pipeline`` function: the tasks they create join that pipeline.
"""

from typing import Any

from kfp import dsl

from kftrain_components.evaluation.evaluate_classifier.component import evaluate_classifier
from kftrain_components.export.export_model.component import export_model


def evaluate_gate_and_export(
    train: dsl.PipelineTask, prep: dsl.PipelineTask, min_accuracy: float, baseline_model_uri: str
) -> dsl.PipelineTask:
    """Evaluate the trained model; export it only when it passes the quality gate."""
    train.set_caching_options(False)  # a training job is never replayed from cache
    evaluation = evaluate_classifier(
        model=train.outputs["model"],
        dataset=prep.outputs["dataset"],
        min_accuracy=min_accuracy,
        baseline_model_uri=baseline_model_uri,
    )
    with dsl.If(evaluation.outputs["Output"] == True, name="accuracy-gate"):  # noqa: E712 (a KFP condition)
        export = export_model(model=train.outputs["model"], dataset=prep.outputs["dataset"])
        export.set_caching_options(False)  # the export reads artifacts that a re-run may have replaced
    return evaluation


def trainer_flags(**flags: Any) -> list[Any]:
    """The trainer's command-line flags from pipeline parameters: ``batch_size=x`` becomes ``--batch-size x``.

    The values stay pipeline parameters (placeholders), resolved by KFP when the launch step runs.
    """
    return [item for name, value in flags.items() for item in (f"--{name.replace('_', '-')}", value)]

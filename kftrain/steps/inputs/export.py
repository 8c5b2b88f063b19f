"""The ``export_model`` component's inputs and outputs: the one table its signature is written from and its step
(:func:`kftrain.steps.export.component.export_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.steps.inputs import REQUIRED, Output, artifact, component_input
from kftrain.steps.inputs.evaluate import DATASET_BY_URI


@dataclass(frozen=True)
class ExportInputs:
    """What ``export_model`` is given: the model, the dataset its exports are checked on, the outputs it fills, the
    targets, and the registration in MLflow."""

    model: Any = artifact("dsl.Input[dsl.Model]", "The trained model (a folder following the model contract).")
    dataset_uri: str = component_input(
        REQUIRED,
        "URI of the prepared dataset (prepare_dataset's dataset_uri output); its test split checks that every "
        f"export reproduces the model. {DATASET_BY_URI}",
    )
    exported: Any = artifact(
        "dsl.Output[dsl.Model]", "triton/<model_name>/{config.pbtxt,1/...}, tfserving/<model_name>/1/..., export.json."
    )
    inference_service: Any = artifact(
        "dsl.Output[dsl.Artifact]", "A KServe InferenceService (YAML) serving the first target from `exported`."
    )
    model_name: str = component_input(
        "model", "Name of the model in the repository and of the InferenceService (a Kubernetes name)."
    )
    targets: list[str] = component_input(
        [],
        "triton, triton-onnx (PyTorch models) and/or tfserving (TensorFlow models); empty: every one the model's "
        "format allows.",
    )
    verify_rows: int = component_input(0, "Rows of the test split the exports are compared on (0: all of them).")
    register_model: str = component_input(
        "",
        "Name of the MLflow registered model the export becomes a new version of (created if missing), its source "
        "the export's URI, tagged with the pipeline run, `evaluation_metrics` and `gate_passed`; empty: not "
        "registered. Needs MLflow tracking (MLFLOW_TRACKING_URI and MLFLOW_RUN_ID).",
    )
    evaluation_metrics: Any = artifact(
        "Optional[dsl.Input[dsl.Metrics]]",
        "The evaluation's Metrics, tagged on the registered version (optional).",
        default=None,
    )
    gate_passed: bool | None = component_input(
        None, "The quality gate's verdict, tagged on the registered version (optional)."
    )


OUTPUTS = (Output("model_version", str, 'The registered version ("" when not registered).'),)

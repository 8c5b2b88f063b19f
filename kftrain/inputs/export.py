"""The ``export_model`` component's inputs and outputs: the one table its signature is written from and its step
(:func:`kftrain.steps.export.component.export_component`) parses."""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.inputs import Output, component_input, rows


@dataclass(frozen=True)
class ExportInputs:
    """What ``export_model`` is given: the model, the dataset its exports are checked on, the outputs it fills, the
    targets, and the registration in MLflow."""

    model: Any = rows.model(rows.TRAINED_MODEL)
    dataset_uri: str = rows.dataset_uri(
        "prepared dataset (prepare_dataset's dataset_uri output); its test split checks that every export "
        "reproduces the model."
    )
    exported: Any = rows.exported("triton/<model_name>/{config.pbtxt,1/...}, tfserving/<model_name>/1/..., export.json")
    inference_service: Any = rows.inference_service("the first target from `exported`")
    model_name: str = rows.model_name()
    targets: list[str] = component_input(
        [],
        "triton, triton-onnx (PyTorch models) and/or tfserving (TensorFlow models); empty: every one the model's "
        "format allows.",
    )
    verify_rows: int = component_input(0, "Rows of the test split the exports are compared on (0: all of them).")
    register_model: str = rows.register_model()
    evaluation_metrics: Any = rows.evaluation_metrics()
    gate_passed: bool | None = rows.gate_passed()
    mlflow_tracking_uri: str = rows.mlflow_tracking_uri()


OUTPUTS = (Output("model_version", str, 'The registered version ("" when not registered).'),)

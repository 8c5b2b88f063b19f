"""KFP component: export a model to the layouts model servers load (Triton, TF Serving), verified by reloading
it, and a KServe InferenceService manifest serving it."""

from typing import NamedTuple, Optional

from kfp import dsl

from kftrain_components.images import PYTORCH_IMAGE


@dsl.component(base_image=PYTORCH_IMAGE, install_kfp_package=False)
def export_model(
    model: dsl.Input[dsl.Model],
    dataset_uri: str,
    exported: dsl.Output[dsl.Model],
    inference_service: dsl.Output[dsl.Artifact],
    model_name: str = "model",
    targets: list = [],
    verify_rows: int = 0,
    register_model: str = "",
    evaluation_metrics: Optional[dsl.Input[dsl.Metrics]] = None,  # noqa: UP045 (KFP reads typing.Optional only)
    gate_passed: Optional[bool] = None,  # noqa: UP045
) -> NamedTuple("Outputs", [("model_version", str)]):
    """Export `model` (any format of the model contract) to a Triton model repository and/or TF Serving layout.

    Every written model is reloaded with the runtime that serves it and must reproduce the model's outputs on
    the dataset's test split before anything is published. With MLflow tracking (KFP 2.17's MLflow plugin, or
    `kftrain run --mlflow`), the task's MLflow run is tagged with every layout's URI, and `register_model`
    registers the export in MLflow's Model Registry.

    Args:
        model: The trained model (a folder following the model contract).
        dataset_uri: URI of the prepared dataset (prepare_dataset's dataset_uri output); its test split checks
            that every export reproduces the model.
            It is read by URI, only the split it needs and in batches: as an input artifact, KFP's backend
            would copy the whole dataset into the pod before the step starts.
        exported: triton/<model_name>/{config.pbtxt,1/...}, tfserving/<model_name>/1/..., export.json.
        inference_service: A KServe InferenceService (YAML) serving the first target from `exported`.
        model_name: Name of the model in the repository and of the InferenceService (a Kubernetes name).
        targets: triton, triton-onnx (PyTorch models) and/or tfserving (TensorFlow models); empty: every one
            the model's format allows.
        verify_rows: Rows of the test split the exports are compared on (0: all of them).
        register_model: Name of the MLflow registered model the export becomes a new version of (created if
            missing), its source the export's URI, tagged with the pipeline run, `evaluation_metrics` and
            `gate_passed`; empty: not registered. Needs MLflow tracking (MLFLOW_TRACKING_URI and MLFLOW_RUN_ID).
        evaluation_metrics: The evaluation's Metrics, tagged on the registered version (optional).
        gate_passed: The quality gate's verdict, tagged on the registered version (optional).

    Returns:
        model_version: The registered version ("" when not registered).
    """
    from kftrain.steps.export.component import export_component

    return (
        export_component(
            model=model,
            dataset_uri=dataset_uri,
            exported=exported,
            inference_service=inference_service,
            model_name=model_name,
            targets=targets,
            verify_rows=verify_rows,
            register_model=register_model,
            evaluation_metrics=evaluation_metrics,
            gate_passed=gate_passed,
        ),
    )

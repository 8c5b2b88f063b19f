"""KFP component: export a model to the layouts model servers load (Triton, TF Serving), verified by reloading
it, and a KServe InferenceService manifest serving it."""

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
):
    """Export `model` (any format of the model contract) to a Triton model repository and/or TF Serving layout.

    Every written model is reloaded with the runtime that serves it and must reproduce the model's outputs on
    the dataset's test split before anything is published.

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
    """
    from types import SimpleNamespace

    from kftrain.steps.export.component import export_component

    export_component(
        model=model,
        dataset=SimpleNamespace(uri=dataset_uri, metadata={}),
        exported=exported,
        inference_service=inference_service,
        model_name=model_name,
        targets=targets,
        verify_rows=verify_rows,
    )

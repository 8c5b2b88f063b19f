"""KFP component: export a trained model to the layout a model server loads, verified by reloading it."""

from kfp import dsl

from kftrain_components.images import PYTORCH_IMAGE


@dsl.component(base_image=PYTORCH_IMAGE, install_kfp_package=False)
def export_model(
    model: dsl.Input[dsl.Model],
    dataset: dsl.Input[dsl.Dataset],
    exported: dsl.Output[dsl.Model],
    model_name: str = "digits",
    formats: list = [],
):
    """Export `model` (TorchScript + ONNX for PyTorch, SavedModel for TensorFlow) with Triton configs.

    Args:
        model: The trained model.
        dataset: The prepared dataset; its test split checks the export reproduces the model.
        exported: The model repository: <model_name>/1/... per format, with config.pbtxt.
        model_name: Name of the model in the repository.
        formats: Formats to write; empty: the framework's defaults.
    """
    import logging

    from kftrain.steps.export import export_model as export
    from kftrain.storage import output_uri

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    exported.uri = output_uri(exported.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    result = export(model.uri, dataset.uri, exported.uri, model_name=model_name, formats=tuple(formats) or None)
    exported.metadata.update(result.to_metadata())

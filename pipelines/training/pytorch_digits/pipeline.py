"""Data prep -> PyTorchJob (DDP) -> evaluation -> quality gate -> export, on the digits dataset."""

from kftrain_components.images import PYTORCH_IMAGE
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

pytorch_digits = training_pipeline(
    name="pytorch-digits",
    module=__name__,
    description="Prepare the digits dataset, train an MLP with PyTorch DDP as a PyTorchJob, evaluate it, "
    "and export TorchScript + ONNX when it meets the accuracy bar.",
    summary="Train and export a digits classifier.",
    training=[
        Param("workers", int, 1, "PyTorchJob Worker replicas besides the Master."),
        Param("epochs", int, 20, "Training epochs."),
        Param("batch_size", int, 32, "Per-process batch size."),
        Param("learning_rate", float, 0.05, "Base learning rate (scaled by the number of processes)."),
    ],
    launch=lambda p, dataset, args, platform: pytorchjob_launch(
        dataset=dataset, image=PYTORCH_IMAGE, workers=p.workers, args=args, **platform
    ),
)

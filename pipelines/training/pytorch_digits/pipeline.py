"""Prepare the digits dataset, train an MLP with PyTorch DDP as a PyTorchJob, evaluate it, and export
TorchScript + ONNX when it meets the accuracy bar."""

from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

pytorch_digits = training_pipeline(
    __name__,
    lambda p, dataset_uri, args, platform: pytorchjob_launch(
        dataset_uri=dataset_uri, workers=p.workers, args=args, **platform
    ),
    Param("workers", int, 1, "PyTorchJob Worker replicas besides the Master."),
    epochs=20,
)

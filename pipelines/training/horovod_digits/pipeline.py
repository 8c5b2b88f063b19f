"""Prepare the digits dataset, train an MLP with Horovod (PyTorch) as an MPIJob, evaluate it, and export
TorchScript + ONNX when it meets the accuracy bar."""

from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_pipelines.stages import Param, launched_by, training_pipeline

horovod_digits = training_pipeline(
    __name__,
    launched_by(mpijob_launch, "workers", "slots_per_worker", "api_version"),
    Param("workers", int, 2, "MPIJob Worker replicas; mpirun starts one rank per slot."),
    Param("slots_per_worker", int, 1, "MPI slots (ranks) per Worker."),
    Param("api_version", str, "kubeflow.org/v2beta1", "MPIJob version: kubeflow.org/v2beta1 or kubeflow.org/v1."),
)

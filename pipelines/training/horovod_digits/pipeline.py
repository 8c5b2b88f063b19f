"""Data prep -> MPIJob (Horovod PyTorch, 2 workers x 1 slot) -> evaluation -> quality gate -> export, on digits."""

from kftrain_components.images import HOROVOD_IMAGE
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_pipelines.stages import Param, training_pipeline

horovod_digits = training_pipeline(
    name="horovod-digits",
    module=__name__,
    description="Prepare the digits dataset, train an MLP with Horovod (PyTorch) as an MPIJob, evaluate it, "
    "and export TorchScript + ONNX when it meets the accuracy bar.",
    summary="Train and export a digits classifier with Horovod.",
    training=[
        Param("workers", int, 2, "MPIJob Worker replicas; mpirun starts one rank per slot."),
        Param("slots_per_worker", int, 1, "MPI slots (ranks) per Worker."),
        Param("epochs", int, 20, "Training epochs."),
        Param("batch_size", int, 32, "Per-rank batch size."),
        Param("learning_rate", float, 0.05, "Base learning rate (scaled by the number of ranks)."),
        Param("checkpoint_every_steps", int, 0, "Also checkpoint every N steps (0: once per epoch only)."),
        Param("api_version", str, "kubeflow.org/v2beta1", "MPIJob version: kubeflow.org/v2beta1 or kubeflow.org/v1."),
    ],
    launch=lambda p, dataset, args, platform: mpijob_launch(
        dataset=dataset,
        image=HOROVOD_IMAGE,
        workers=p.workers,
        slots_per_worker=p.slots_per_worker,
        api_version=p.api_version,
        args=args,
        **platform,
    ),
)

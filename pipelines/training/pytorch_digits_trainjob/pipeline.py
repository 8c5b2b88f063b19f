"""pytorch-digits on Kubeflow Trainer v2: the same data prep, PyTorch DDP trainer, evaluation and export, the
training run as a TrainJob on the torch-distributed runtime (torchrun on every node) instead of a PyTorchJob."""

from kftrain_components.training.trainjob_launch.component import trainjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

pytorch_digits_trainjob = training_pipeline(
    __name__,
    lambda p, dataset_uri, args, platform: trainjob_launch(
        dataset_uri=dataset_uri, runtime=p.runtime, num_nodes=p.num_nodes, args=args, **platform
    ),
    Param("num_nodes", int, 2, "TrainJob nodes (pytorch-digits' Master + Worker)."),
    Param("runtime", str, "torch-distributed", "The ClusterTrainingRuntime to run on (a torch one)."),
    epochs=20,
    learning_rate=0.05,
)

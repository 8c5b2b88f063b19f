"""horovod-digits on Kubeflow Trainer v2: the same Horovod (PyTorch) trainer run by mpirun from the launcher of
a TrainJob on an MPI runtime whose launcher runs as a node, instead of an MPIJob."""

from kftrain_components.training.trainjob_launch.component import trainjob_launch
from kftrain_pipelines.stages import Param, launched_by, training_pipeline

horovod_digits_trainjob = training_pipeline(
    __name__,
    launched_by(trainjob_launch, "runtime", "num_nodes", num_proc_per_node="slots_per_node"),
    Param("num_nodes", int, 2, "TrainJob nodes (the launcher is one); mpirun starts one rank per slot."),
    Param("slots_per_node", int, 1, "MPI slots (ranks) per node."),
    Param(
        "runtime",
        str,
        "deepspeed-distributed",
        "An MPI ClusterTrainingRuntime whose node image runs this release's Horovod trainer and an ssh daemon.",
    ),
)

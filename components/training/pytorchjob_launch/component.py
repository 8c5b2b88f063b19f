"""KFP component: run a PyTorchJob (Master + Workers, DDP) and fail the step when the job fails."""

from kftrain_components.training.launch_inputs import Input, launch_component

pytorchjob_launch = launch_component(
    kind="PyTorchJob",
    name="pytorchjob_launch",
    module=__name__,
    summary="Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args`.",
    replicas=[
        Input("workers", int, 1, "Number of Worker replicas besides the Master."),
        Input("nproc_per_node", str, "1", "Processes per replica (auto, cpu, gpu or a number)."),
    ],
    overrides=[
        Input("shm_size", str, "2Gi", "Size of a memory-backed /dev/shm on each replica (data loaders, NCCL)."),
    ],
)

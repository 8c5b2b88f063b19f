"""Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args` (DDP); fail when the job fails."""

from kftrain_components.training.launch_inputs import Input, launch_component

pytorchjob_launch = launch_component(
    __name__,
    Input("workers", int, 1, "Number of Worker replicas besides the Master."),
    Input("nproc_per_node", str, "1", "Processes per replica (auto, cpu, gpu or a number)."),
    shm_size="2Gi",  # PyTorch's data loader workers and NCCL share memory through /dev/shm
)

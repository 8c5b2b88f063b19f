"""KFP component: run a PyTorchJob (Master + Workers, DDP) and fail the step when the job fails."""

from kftrain_components.training.launch_inputs import Input, launch_component

pytorchjob_launch = launch_component(
    kind="PyTorchJob",
    name="pytorchjob_launch",
    module=__name__,
    summary="Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args` + `trainer_args`.",
    replicas=[
        Input("workers", int, 1, "Number of Worker replicas besides the Master."),
        Input("nproc_per_node", str, "1", "Processes per replica (auto, cpu, gpu or a number)."),
    ],
    overrides=[
        Input("command", list, ["python", "-m", "kftrain.trainers.torch_ddp"], "Program of every replica."),
        Input("image", str, "", "Trainer image of every replica; empty: the PyTorch trainer image of this release."),
    ],
)

"""Launch a Kubeflow Trainer v2 TrainJob: `num_nodes` nodes of `runtime` running `command` + `args`; fail when it fails.

On a torch runtime (torch-distributed) the default program is this release's DDP trainer under torchrun; on an
MPI runtime (deepspeed-distributed, or one of your own) the Launcher runs mpirun of the Horovod trainer. The pod
settings go where Trainer v2.3.0 takes them: resources as trainer.resourcesPerNode, env and secrets in
trainer.env, node selector, tolerations, service account, pull secrets and volumes as a runtime patch; a
priority class or a scheduling policy is refused (the runtime decides them).
"""

from kftrain_components.training.launch_inputs import Input, launch_component

trainjob_launch = launch_component(
    __name__,
    Input("runtime", str, "torch-distributed", "The ClusterTrainingRuntime to run on."),
    Input("num_nodes", int, 2, "Number of nodes (pods) of the trainer."),
    Input("num_proc_per_node", int, 1, "Processes per node (torch: torchrun's; MPI: slots); 0: the runtime's."),
    omit=("restart_policy", "backoff_limit", "clean_pod_policy", "ttl_seconds_after_finished", "scheduling"),
    shm_size="2Gi",  # PyTorch's data loader workers and NCCL share memory through /dev/shm
)

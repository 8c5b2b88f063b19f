"""Launch a Kubeflow Trainer v2 TrainJob: `num_nodes` nodes of `runtime` running `command` + `args`; fail when it fails.

On a torch runtime (torch-distributed) the default program is this release's DDP trainer under torchrun; on an
MPI runtime (deepspeed-distributed, or one of your own) the Launcher runs mpirun of the Horovod trainer. The pod
settings go where Trainer v2.3.0 takes them: resources as trainer.resourcesPerNode, env and secrets in
trainer.env, node selector, tolerations, service account, pull secrets and volumes as a runtime patch; a
priority class or a scheduling policy is refused (the runtime decides them).
"""

from kftrain_components.training.launch_component import launch_component

trainjob_launch = launch_component(__name__, "TrainJob")
# The variant for KFP backends 2.15 and later: the launch task's own settings (dsl.TaskConfig) reach every replica.
trainjob_launch_task_config = launch_component(__name__, "TrainJob", task_config=True)

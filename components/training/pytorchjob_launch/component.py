"""Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args` (DDP); fail when the job fails.

With `elastic_max_workers` set the job is elastic: Workers only (no Master), starting with `workers`, between
`elastic_min_workers` and `elastic_max_workers` as workers are lost or added (or an HPA with `elastic_metrics`
scales it), re-forming at each torchrun rendezvous; the default program then runs under torchrun.
"""

from kftrain_components.training.launch_component import launch_component

pytorchjob_launch = launch_component(__name__, "PyTorchJob")
# The variant for KFP backends 2.15 and later: the launch task's own settings (dsl.TaskConfig) reach every replica.
pytorchjob_launch_task_config = launch_component(__name__, "PyTorchJob", task_config=True)

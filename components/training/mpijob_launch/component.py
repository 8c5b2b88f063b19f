"""Launch an MPIJob: one Launcher running `command` + `args` (mpirun ...) and `workers` Workers hosting the ranks.

With no `command`, the Launcher runs mpirun of this release's Horovod trainer, one rank per slot.
"""

from kftrain_components.training.launch_component import launch_component

mpijob_launch = launch_component(__name__, "MPIJob")
# The variant for KFP backends 2.15 and later: the launch task's own settings (dsl.TaskConfig) reach every replica.
mpijob_launch_task_config = launch_component(__name__, "MPIJob", task_config=True)

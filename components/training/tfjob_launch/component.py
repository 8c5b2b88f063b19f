"""Launch a TFJob running `command` + `args` in every replica (the operator sets TF_CONFIG); fail when it fails.

Workers only (the default): MultiWorkerMirroredStrategy. With `ps` parameter servers and a
`chief`: ParameterServerStrategy, the chief coordinating. An `evaluator` evaluates checkpoints
beside the training.
"""

from kftrain_components.training.launch_component import launch_component

tfjob_launch = launch_component(__name__, "TFJob")
# The variant for KFP backends 2.15 and later: the launch task's own settings (dsl.TaskConfig) reach every replica.
tfjob_launch_task_config = launch_component(__name__, "TFJob", task_config=True)

"""Launch a TFJob running `command` + `args` in every replica (the operator sets TF_CONFIG); fail when it fails.

Workers only (the default): MultiWorkerMirroredStrategy. With `ps` parameter servers and a
`chief`: ParameterServerStrategy, the chief coordinating. An `evaluator` evaluates checkpoints
beside the training.
"""

from kftrain_components.training.launch_inputs import Input, launch_component

tfjob_launch = launch_component(
    __name__,
    Input("chief", int, 0, "Chief replicas: 0 or 1 (the job succeeds when the chief does)."),
    Input("ps", int, 0, "Parameter server replicas (0: no ParameterServerStrategy)."),
    Input("workers", int, 2, "Worker replicas."),
    Input("evaluator", int, 0, "Evaluator replicas: 0 or 1."),
)

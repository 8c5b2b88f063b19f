"""Data prep -> TFJob (ParameterServerStrategy: chief, PS, workers, evaluator) -> evaluation -> gate -> export."""

from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

tf_digits_ps = training_pipeline(
    name="tf-digits-ps",
    module=__name__,
    description="Prepare the digits dataset, train an MLP with Keras under ParameterServerStrategy as a TFJob "
    "(chief coordinator, parameter servers, workers, side-car evaluator), evaluate it, and export a SavedModel "
    "when it meets the accuracy bar.",
    summary="Train and export a digits classifier with TensorFlow's parameter-server training.",
    training=[
        Param("ps", int, 1, "Parameter server replicas (they hold the variables)."),
        Param("workers", int, 2, "Worker replicas (they run the steps the chief schedules)."),
        Param("evaluator", int, 1, "1 to run a side-car evaluator on every checkpoint, 0 for none."),
        Param(
            "epochs", int, 8, "Passes over the training data (steps = epochs x rows / batch_size, over the workers)."
        ),
        Param("batch_size", int, 32, "Batch size of one step."),
        Param("learning_rate", float, 0.003, "Adam learning rate."),
        Param("checkpoint_every_steps", int, 50, "Checkpoint every this many steps; a restarted job resumes."),
    ],
    launch=lambda p, dataset, args, platform: tfjob_launch(
        dataset=dataset,
        image=TENSORFLOW_IMAGE,
        chief=1,
        ps=p.ps,
        workers=p.workers,
        evaluator=p.evaluator,
        args=args,
        **platform,
    ),
)

"""Prepare the digits dataset, train an MLP with Keras under ParameterServerStrategy as a TFJob (chief
coordinator, parameter servers, workers, side-car evaluator), evaluate it, and export a SavedModel when it
meets the accuracy bar."""

from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_pipelines.stages import Param, launched_by, training_pipeline

tf_digits_ps = training_pipeline(
    __name__,
    launched_by(tfjob_launch, "ps", "workers", "evaluator", fixed={"chief": 1}),
    Param("ps", int, 1, "Parameter server replicas (they hold the variables)."),
    Param("workers", int, 2, "Worker replicas (they run the steps the chief schedules)."),
    Param("evaluator", int, 1, "1 to run a side-car evaluator on every checkpoint, 0 for none."),
    model_image=TENSORFLOW_IMAGE,
    epochs=8,
    global_batch_size=32,  # ParameterServerStrategy: one worker's step
    learning_rate=0.003,
    checkpoint_every_steps=50,
)

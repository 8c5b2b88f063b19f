"""Data prep -> TFJob (MultiWorkerMirroredStrategy) -> evaluation -> quality gate -> export, on the digits dataset."""

from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

tf_digits = training_pipeline(
    name="tf-digits",
    module=__name__,
    description="Prepare the digits dataset, train an MLP with Keras under MultiWorkerMirroredStrategy as a "
    "TFJob, evaluate it, and export a SavedModel when it meets the accuracy bar.",
    summary="Train and export a digits classifier with TensorFlow.",
    training=[
        Param("workers", int, 2, "TFJob Worker replicas (MultiWorkerMirroredStrategy; worker 0 writes the model)."),
        Param("epochs", int, 8, "Training epochs."),
        Param("batch_size", int, 32, "Per-worker batch size (the global batch is batch_size x workers)."),
        Param("learning_rate", float, 0.003, "Adam learning rate."),
        Param("checkpoint_every_steps", int, 50, "Checkpoint every this many steps; a restarted job resumes."),
    ],
    launch=lambda p, dataset, args, platform: tfjob_launch(
        dataset=dataset, image=TENSORFLOW_IMAGE, workers=p.workers, args=args, **platform
    ),
)

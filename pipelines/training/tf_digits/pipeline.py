"""Prepare the digits dataset, train an MLP with Keras under MultiWorkerMirroredStrategy as a TFJob, evaluate
it, and export a SavedModel when it meets the accuracy bar."""

from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

tf_digits = training_pipeline(
    __name__,
    lambda p, dataset_uri, args, platform: tfjob_launch(
        dataset_uri=dataset_uri, workers=p.workers, args=args, **platform
    ),
    Param("workers", int, 2, "TFJob Worker replicas (MultiWorkerMirroredStrategy; worker 0 writes the model)."),
    model_image=TENSORFLOW_IMAGE,
    epochs=8,
    learning_rate=0.003,
    checkpoint_every_steps=50,
)

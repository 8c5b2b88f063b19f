"""Your own pipeline: a PyTorchJob of your own training script, then a step of your own, run on this machine with

    cd examples/own_pipeline && kftrain run my_pipeline:my_pipeline

(``kftrain run MODULE:FUNCTION`` imports MODULE from the current folder, after the standard library). The same
file compiles for a cluster (``kftrain compile my_pipeline:my_pipeline`` writes my-pipeline.yaml) and submits:
``kftrain submit my_pipeline:my_pipeline --host ... --param image=<an image with train.py>``.
"""

from kfp import dsl

from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch


@dsl.component(base_image="python:3.11-slim")
def describe_model(model: dsl.Input[dsl.Model]) -> str:
    """A step of your own: what the training job left in its model folder."""
    import os

    files = sorted(os.listdir(model.path))
    print(f"the model folder holds {', '.join(files)}")
    return ", ".join(files)


@dsl.pipeline(name="my-pipeline", description="My training script as a PyTorchJob, then a step of my own.")
def my_pipeline(workers: int = 1, image: str = "") -> None:
    train = pytorchjob_launch(
        image=image,  # on a cluster: an image with train.py in its working folder; locally ignored
        command=["python", "train.py"],
        args=["--steps", "30"],
        workers=workers,
        shm_size="",  # no /dev/shm volume for this small job
    )
    describe_model(model=train.outputs["model"])

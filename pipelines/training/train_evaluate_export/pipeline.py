"""Your own training program on your own data: prepare a dataset from any Parquet/CSV/JSON Lines source, run your
image and command as a PyTorchJob, TFJob, MPIJob or Kubeflow Trainer v2 TrainJob (job_kind; a TrainJob on the
runtime named by runtime), evaluate the model it writes, and export it to Triton, TF Serving and KServe when it
passes the quality gate."""

from typing import Any

from kfp import dsl

from kftrain.inputs.prep import PrepareInputs
from kftrain_components.control.fail.component import fail
from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.images import PYTORCH_IMAGE, TENSORFLOW_IMAGE
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from kftrain_pipelines.stages import (
    PLATFORM,
    QUALITY,
    Param,
    evaluate_and_export,
    pipeline_function,
    step_params,
    use_platform_settings,
    values,
)
from kftrain_pipelines.stages import with_defaults as _with_defaults

JOB_KINDS = ("PyTorchJob", "TFJob", "MPIJob", "TrainJob")
# The image each kind's evaluation and export run in: the framework image that loads what such a program
# writes (PyTorch: TorchScript and ONNX; TensorFlow: SavedModel and Keras; a TrainJob on the default
# torch-distributed runtime writes what a PyTorchJob does). An MPIJob's default program is Horovod PyTorch (its image,
# python-horovod-pytorch, carries no ONNX Runtime): its model is evaluated in the PyTorch image.
MODEL_IMAGES = {
    "PyTorchJob": PYTORCH_IMAGE,
    "TFJob": TENSORFLOW_IMAGE,
    "MPIJob": PYTORCH_IMAGE,
    "TrainJob": PYTORCH_IMAGE,
}

DATA = step_params(
    PrepareInputs,
    "source",
    "label_column",
    "task",
    "features",
    "missing",
    "seed",
    "validation_fraction",
    "test_fraction",
)
TRAINING = (
    Param("job_kind", str, "PyTorchJob", "Which training job runs the program: PyTorchJob, TFJob, MPIJob or TrainJob."),
    Param("image", str, "", "Image of every replica; empty: this release's trainer image for the job kind."),
    Param(
        "command",
        list,
        [],
        "Program of every replica (an MPIJob's: the Launcher's, e.g. mpirun python train.py); empty: this "
        "release's trainer for the job kind. It gets the URIs as $KFTRAIN_DATASET_URI and $KFTRAIN_MODEL_URI.",
    ),
    Param("args", list, [], "Arguments of the program."),
    Param(
        "workers",
        int,
        1,
        "Worker replicas: a PyTorchJob's besides its Master, a TFJob's (MultiWorkerMirrored), an MPIJob's (one rank "
        "each).",
    ),
    Param("env", dict, {}, "Extra environment variables of every replica."),
    Param(
        "runtime",
        str,
        "torch-distributed",
        "TrainJob: the ClusterTrainingRuntime (Kubeflow Trainer v2) to run on: torch-distributed, "
        "deepspeed-distributed, mlx-distributed, jax-distributed, xgboost-distributed, or one of yours.",
    ),
    Param("num_nodes", int, 2, "TrainJob: the trainer's nodes (pods)."),
)
EXPORT = (
    Param("model_name", str, "model", "Name of the exported model and of its KServe InferenceService."),
    Param("export_targets", list, [], "triton, triton-onnx, tfserving; empty: every one the model's format allows."),
)
EVERY = [
    *DATA,
    *TRAINING,
    *_with_defaults(QUALITY, {"gate_metric": "", "gate_threshold": 0.8}, __name__),
    *EXPORT,
    *PLATFORM,
]


def launch(kind: str, p: Any, dataset_uri: Any, platform: dict[str, Any]) -> dsl.PipelineTask:
    """The launch task of ``kind``, with the program and replicas the parameters give."""
    common = {
        "dataset_uri": dataset_uri,
        "image": p.image,
        "command": p.command,
        "args": p.args,
        "env": p.env,
        **platform,
    }
    if kind == "PyTorchJob":
        return pytorchjob_launch(workers=p.workers, **common)
    if kind == "TFJob":
        return tfjob_launch(workers=p.workers, **common)
    if kind == "TrainJob":
        return trainjob_launch(runtime=p.runtime, num_nodes=p.num_nodes, **common)
    return mpijob_launch(workers=p.workers, **common)


def wire(p: Any) -> None:
    """Prep, then one branch per job kind: launch -> evaluate -> gate -> export (KFP 2.17.0's local runner has
    no ``dsl.OneOf`` for artifacts, so each branch evaluates its own launch's model); an unknown kind fails."""
    prep = prepare_dataset(**values(p, DATA))
    prep.set_caching_options(False)  # a source URI's content can change between runs
    use_platform_settings(prep, p)
    platform = values(p, PLATFORM)
    branches = (dsl.If, dsl.Elif, dsl.Elif, dsl.Elif)
    for branch, kind in zip(branches, JOB_KINDS, strict=True):
        with branch(p.job_kind == kind, name=kind.lower()):
            train = launch(kind, p, prep.outputs["dataset_uri"], platform)
            train.set_caching_options(False)  # a training job is never replayed from cache
            use_platform_settings(train, p)
            evaluate_and_export(
                p,
                train.outputs["model"],
                prep.outputs["dataset_uri"],
                p.model_name,
                p.export_targets,
                model_image=MODEL_IMAGES[kind],
            )
    with dsl.Else(name="unknown-job-kind"):
        failed = fail(message=f"job_kind must be one of {', '.join(JOB_KINDS)}", value=p.job_kind)
        use_platform_settings(failed, p)


train_evaluate_export = pipeline_function(__name__, EVERY, wire)

"""Data prep -> PyTorchJob (DDP) -> evaluation -> quality gate -> export, on the digits dataset."""

from kfp import dsl

from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.images import PYTORCH_IMAGE
from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
from kftrain_pipelines.stages import evaluate_gate_and_export, trainer_flags


@dsl.pipeline(
    name="pytorch-digits",
    description="Prepare the digits dataset, train an MLP with PyTorch DDP as a PyTorchJob, evaluate it, "
    "and export TorchScript + ONNX when it meets the accuracy bar.",
)
def pytorch_digits(
    source: str = "builtin:digits",
    seed: int = 42,
    workers: int = 1,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    min_accuracy: float = 0.9,
    baseline_model_uri: str = "",
    backend: str = "auto",
    timeout_seconds: int = 3600,
):
    """Train and export a digits classifier.

    Args:
        source: Dataset: builtin:digits or a Parquet/CSV URI with a label column.
        seed: Seed of the data split and of the model's initialization.
        workers: PyTorchJob Worker replicas besides the Master.
        epochs: Training epochs.
        batch_size: Per-process batch size.
        learning_rate: Base learning rate (scaled by the number of processes).
        min_accuracy: Test accuracy the model needs to be exported.
        baseline_model_uri: URI of the model in production (optional): export only if not worse on the test split.
        backend: Where the PyTorchJob runs: auto, local or kubernetes.
        timeout_seconds: Fail and delete the training job after this long.
    """
    prep = prepare_dataset(source=source, seed=seed)
    train = pytorchjob_launch(
        dataset=prep.outputs["dataset"],
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
        image=PYTORCH_IMAGE,
        workers=workers,
        trainer_args=trainer_flags(epochs=epochs, batch_size=batch_size, lr=learning_rate, seed=seed),
        backend=backend,
        timeout_seconds=timeout_seconds,
    )
    evaluate_gate_and_export(train, prep, min_accuracy, baseline_model_uri)

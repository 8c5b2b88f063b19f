"""Data prep -> MPIJob (Horovod PyTorch, 2 workers x 1 slot) -> evaluation -> quality gate -> export, on digits."""

from kfp import dsl

from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.images import HOROVOD_IMAGE
from kftrain_components.training.mpijob_launch.component import mpijob_launch
from kftrain_pipelines.stages import evaluate_gate_and_export, trainer_flags

# The Launcher's program: one rank per slot of the 2 workers x 1 slot the MPIJob declares.
WORKERS = 2
SLOTS_PER_WORKER = 1
LAUNCHER_COMMAND = [
    "mpirun",
    "-n",
    str(WORKERS * SLOTS_PER_WORKER),
    "--bind-to",
    "none",
    "--map-by",
    "slot",
    "python",
    "-m",
    "kftrain.trainers.horovod_torch",
]


@dsl.pipeline(
    name="horovod-digits",
    description="Prepare the digits dataset, train an MLP with Horovod (PyTorch) as an MPIJob, evaluate it, "
    "and export TorchScript + ONNX when it meets the accuracy bar.",
)
def horovod_digits(
    source: str = "builtin:digits",
    seed: int = 42,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    checkpoint_every_steps: int = 0,
    min_accuracy: float = 0.9,
    baseline_model_uri: str = "",
    api_version: str = "kubeflow.org/v2beta1",
    backend: str = "auto",
    timeout_seconds: int = 3600,
):
    """Train and export a digits classifier with Horovod.

    Args:
        source: Dataset: builtin:digits or a Parquet/CSV URI with a label column.
        seed: Seed of the data split and of the model's initialization.
        epochs: Training epochs.
        batch_size: Per-rank batch size.
        learning_rate: Base learning rate (scaled by the number of ranks).
        checkpoint_every_steps: Also checkpoint every N steps (0: once per epoch only).
        min_accuracy: Test accuracy the model needs to be exported.
        baseline_model_uri: URI of the model in production (optional): export only if not worse on the test split.
        api_version: MPIJob version: kubeflow.org/v2beta1 (mpi-operator) or kubeflow.org/v1 (training-operator).
        backend: Where the MPIJob runs: auto, local or kubernetes.
        timeout_seconds: Fail and delete the training job after this long.
    """
    prep = prepare_dataset(source=source, seed=seed)
    train = mpijob_launch(
        dataset=prep.outputs["dataset"],
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
        image=HOROVOD_IMAGE,
        command=LAUNCHER_COMMAND,
        workers=WORKERS,
        slots_per_worker=SLOTS_PER_WORKER,
        trainer_args=trainer_flags(
            epochs=epochs,
            batch_size=batch_size,
            lr=learning_rate,
            seed=seed,
            checkpoint_every_steps=checkpoint_every_steps,
        ),
        api_version=api_version,
        backend=backend,
        timeout_seconds=timeout_seconds,
    )
    evaluate_gate_and_export(train, prep, min_accuracy, baseline_model_uri)

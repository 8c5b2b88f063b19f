"""Data prep -> TFJob (ParameterServerStrategy: chief, PS, workers, evaluator) -> evaluation -> gate -> export."""

from kfp import dsl

from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.tfjob_launch.component import tfjob_launch
from kftrain_pipelines.stages import evaluate_gate_and_export, trainer_flags


@dsl.pipeline(
    name="tf-digits-ps",
    description="Prepare the digits dataset, train an MLP with Keras under ParameterServerStrategy as a TFJob "
    "(chief coordinator, parameter servers, workers, side-car evaluator), evaluate it, and export a SavedModel "
    "when it meets the accuracy bar.",
)
def tf_digits_ps(
    source: str = "builtin:digits",
    seed: int = 42,
    ps: int = 1,
    workers: int = 2,
    evaluator: int = 1,
    epochs: int = 8,
    batch_size: int = 32,
    learning_rate: float = 0.003,
    checkpoint_every_steps: int = 50,
    min_accuracy: float = 0.9,
    baseline_model_uri: str = "",
    backend: str = "auto",
    timeout_seconds: int = 3600,
):
    """Train and export a digits classifier with TensorFlow's parameter-server training.

    Args:
        source: Dataset: builtin:digits or a Parquet/CSV URI with a label column.
        seed: Seed of the data split and of the model's initialization.
        ps: Parameter server replicas (they hold the variables).
        workers: Worker replicas (they run the steps the chief schedules).
        evaluator: 1 to run a side-car evaluator on every checkpoint, 0 for none.
        epochs: Passes over the training data (steps = epochs x rows / batch_size, spread over the workers).
        batch_size: Batch size of one step.
        learning_rate: Adam learning rate.
        checkpoint_every_steps: Checkpoint (BackupAndRestore) every this many steps; a restarted job resumes.
        min_accuracy: Test accuracy the model needs to be exported.
        baseline_model_uri: URI of the model in production (optional): export only if not worse on the test split.
        backend: Where the TFJob runs: auto, local or kubernetes.
        timeout_seconds: Fail and delete the training job after this long.
    """
    prep = prepare_dataset(source=source, seed=seed)
    train = tfjob_launch(
        dataset=prep.outputs["dataset"],
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
        image=TENSORFLOW_IMAGE,
        chief=1,
        ps=ps,
        workers=workers,
        evaluator=evaluator,
        trainer_args=trainer_flags(
            epochs=epochs,
            batch_size=batch_size,
            lr=learning_rate,
            seed=seed,
            checkpoint_every_steps=checkpoint_every_steps,
        ),
        backend=backend,
        timeout_seconds=timeout_seconds,
    )
    evaluate_gate_and_export(train, prep, min_accuracy, baseline_model_uri)

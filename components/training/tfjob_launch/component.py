"""KFP component: run a TFJob (Chief/PS/Workers/Evaluator) and fail the step when the job fails."""

from kfp import dsl

from kftrain_components.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def tfjob_launch(
    dataset: dsl.Input[dsl.Dataset],
    model: dsl.Output[dsl.Model],
    job: dsl.OutputPath(str),
    run_id: str,
    task_id: str,
    image: str = "",
    command: list = ["python", "-m", "kftrain.trainers.tf_trainer"],
    args: list = [
        "--dataset",
        "$(KFTRAIN_DATASET_URI)",
        "--model-dir",
        "$(KFTRAIN_MODEL_URI)",
        "--checkpoint-dir",
        "$(KFTRAIN_CHECKPOINT_URI)",
    ],
    trainer_args: list = [],
    chief: int = 0,
    ps: int = 0,
    workers: int = 2,
    evaluator: int = 0,
    restart_policy: str = "OnFailure",
    backoff_limit: int = 3,
    active_deadline_seconds: int = 0,
    clean_pod_policy: str = "Running",
    env: dict = {},
    cpu: str = "",
    memory: str = "",
    gpus: int = 0,
    manifest: str = "",
    checkpoint_uri: str = "",
    backend: str = "auto",
    timeout_seconds: int = 0,
):
    """Launch a TFJob running `command` + `args` + `trainer_args` in every replica; the operator sets TF_CONFIG.

    Workers only (the default): MultiWorkerMirroredStrategy. With `ps` parameter servers and a
    `chief`: ParameterServerStrategy, the chief coordinating. An `evaluator` evaluates checkpoints
    beside the training.

    Args:
        dataset: Prepared dataset; its URI reaches every replica as $(KFTRAIN_DATASET_URI).
        model: Where the chief (worker 0 without a chief) writes the model ($(KFTRAIN_MODEL_URI)).
        job: Identity of the created job (JSON), written before waiting.
        run_id: The KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER); names the job.
        task_id: The KFP task id (pass dsl.PIPELINE_TASK_ID_PLACEHOLDER); names the job.
        image: Trainer image of every replica; empty: the TensorFlow trainer image of this release.
        command: Program of every replica.
        args: Arguments of the program; $(VAR) references are expanded.
        trainer_args: More arguments appended to args (epochs, learning rate...).
        chief: Chief replicas: 0 or 1 (the job succeeds when the chief does).
        ps: Parameter server replicas (0: no ParameterServerStrategy).
        workers: Worker replicas.
        evaluator: Evaluator replicas: 0 or 1.
        restart_policy: Never, OnFailure, Always or ExitCode.
        backoff_limit: Restarts allowed across the job before it fails.
        active_deadline_seconds: Fail the job after this many seconds (0: no limit).
        clean_pod_policy: All, Running or None: which pods to delete when the job ends.
        env: Extra environment variables of every replica.
        cpu: CPU request and limit of each replica (e.g. "2"); empty: none.
        memory: Memory request and limit of each replica (e.g. "4Gi"); empty: none.
        gpus: nvidia.com/gpu limit of each replica.
        manifest: A full TFJob YAML; when given it replaces the typed inputs above.
        checkpoint_uri: Checkpoint root; empty: next to the model.
        backend: auto (kubernetes in a pod, else local), local or kubernetes.
        timeout_seconds: Fail and delete the job after this many seconds (0: no limit).
    """
    from kftrain import images
    from kftrain.job import JobKind
    from kftrain.launch import fail_step, launch_component
    from kftrain.storage import output_uri

    for name, value in (("chief", chief), ("evaluator", evaluator)):
        if value not in (0, 1):
            fail_step(f"{name}: must be 0 or 1, got {value}")
    if ps < 0 or workers < 0:
        fail_step(f"{'workers' if workers < 0 else 'ps'}: must be >= 0")
    if ps and not chief:
        fail_step("chief: ParameterServerStrategy needs a chief (the coordinator) when ps > 0")
    model.uri = output_uri(model.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    inputs, result = launch_component(
        kind=JobKind.TFJOB, run_id=run_id, task_id=task_id, image=image, default_image=images.image(images.TENSORFLOW),
        command=command, args=args, trainer_args=trainer_args, workers=workers, restart_policy=restart_policy,
        backoff_limit=backoff_limit, active_deadline_seconds=active_deadline_seconds, clean_pod_policy=clean_pod_policy,
        env=env, cpu=cpu, memory=memory, gpus=gpus, manifest=manifest, dataset_uri=dataset.uri, model_uri=model.uri,
        checkpoint_uri=checkpoint_uri, backend=backend, timeout_seconds=timeout_seconds, identity_path=job,
        replicas={"Chief": chief, "PS": ps, "Evaluator": evaluator},
    )  # fmt: skip
    model.metadata.update({"framework": "tensorflow", "job": inputs.name, "duration_s": round(result.duration_s, 1)})

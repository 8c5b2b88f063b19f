"""KFP component: run a PyTorchJob (Master + Workers, DDP) and fail the step when the job fails."""

from kfp import dsl

from kftrain_components.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def pytorchjob_launch(
    dataset: dsl.Input[dsl.Dataset],
    model: dsl.Output[dsl.Model],
    job: dsl.OutputPath(str),
    run_id: str,
    task_id: str,
    image: str = "",
    command: list = ["python", "-m", "kftrain.trainers.torch_ddp"],
    args: list = [
        "--dataset",
        "$(KFTRAIN_DATASET_URI)",
        "--model-dir",
        "$(KFTRAIN_MODEL_URI)",
        "--checkpoint-dir",
        "$(KFTRAIN_CHECKPOINT_URI)",
    ],
    trainer_args: list = [],
    workers: int = 1,
    nproc_per_node: str = "1",
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
    """Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args` + `trainer_args`.

    Args:
        dataset: Prepared dataset; its URI reaches every replica as $(KFTRAIN_DATASET_URI).
        model: Where rank 0 writes the model ($(KFTRAIN_MODEL_URI)).
        job: Identity of the created job (JSON), written before waiting.
        run_id: The KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER); names the job.
        task_id: The KFP task id (pass dsl.PIPELINE_TASK_ID_PLACEHOLDER); names the job.
        image: Trainer image of every replica; empty: the PyTorch trainer image of this release.
        command: Program of every replica.
        args: Arguments of the program; $(VAR) references are expanded.
        trainer_args: More arguments appended to args (epochs, learning rate...).
        workers: Number of Worker replicas besides the Master.
        nproc_per_node: Processes per replica (auto, cpu, gpu or a number).
        restart_policy: Never, OnFailure, Always or ExitCode.
        backoff_limit: Restarts allowed across the job before it fails.
        active_deadline_seconds: Fail the job after this many seconds (0: no limit).
        clean_pod_policy: All, Running or None: which pods to delete when the job ends.
        env: Extra environment variables of every replica.
        cpu: CPU request and limit of each replica (e.g. "2"); empty: none.
        memory: Memory request and limit of each replica (e.g. "4Gi"); empty: none.
        gpus: nvidia.com/gpu limit of each replica.
        manifest: A full PyTorchJob YAML; when given it replaces the typed inputs above.
        checkpoint_uri: Checkpoint root; empty: next to the model.
        backend: auto (kubernetes in a pod, else local), local or kubernetes.
        timeout_seconds: Fail and delete the job after this many seconds (0: no limit).
    """
    from kftrain import images
    from kftrain.job import JobKind, JobSpec
    from kftrain.launch import launch_component
    from kftrain.storage import output_uri

    model.uri = output_uri(model.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    inputs, result = launch_component(
        kind=JobKind.PYTORCHJOB, run_id=run_id, task_id=task_id, image=image,
        default_image=images.image(images.PYTORCH),
        command=command, args=args, trainer_args=trainer_args, workers=workers, restart_policy=restart_policy,
        backoff_limit=backoff_limit, active_deadline_seconds=active_deadline_seconds, clean_pod_policy=clean_pod_policy,
        env=env, cpu=cpu, memory=memory, gpus=gpus, manifest=manifest, dataset_uri=dataset.uri, model_uri=model.uri,
        checkpoint_uri=checkpoint_uri, backend=backend, timeout_seconds=timeout_seconds, identity_path=job,
        spec=JobSpec(nproc_per_node=nproc_per_node),
    )  # fmt: skip
    model.metadata.update({"framework": "pytorch", "job": inputs.name, "duration_s": round(result.duration_s, 1)})

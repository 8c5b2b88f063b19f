"""KFP component: run an MPIJob (a Launcher running mpirun + Workers hosting the ranks); fail the step when it fails."""

from kfp import dsl

from kftrain_components.images import RUNTIME_IMAGE


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def mpijob_launch(
    dataset: dsl.Input[dsl.Dataset],
    model: dsl.Output[dsl.Model],
    job: dsl.OutputPath(str),
    run_id: str,
    task_id: str,
    image: str = "",
    command: list = [
        "mpirun",
        "--bind-to",
        "none",
        "--map-by",
        "slot",
        "python",
        "-m",
        "kftrain.trainers.horovod_torch",
    ],
    args: list = [
        "--dataset",
        "$(KFTRAIN_DATASET_URI)",
        "--model-dir",
        "$(KFTRAIN_MODEL_URI)",
        "--checkpoint-dir",
        "$(KFTRAIN_CHECKPOINT_URI)",
    ],
    trainer_args: list = [],
    workers: int = 2,
    slots_per_worker: int = 1,
    restart_policy: str = "OnFailure",
    backoff_limit: int = 3,
    active_deadline_seconds: int = 0,
    clean_pod_policy: str = "Running",
    launcher_creation_policy: str = "",
    run_launcher_as_worker: bool = False,
    ssh_auth_mount_path: str = "",
    mpi_implementation: str = "",
    api_version: str = "kubeflow.org/v2beta1",
    env: dict = {},
    cpu: str = "",
    memory: str = "",
    gpus: int = 0,
    manifest: str = "",
    checkpoint_uri: str = "",
    backend: str = "auto",
    timeout_seconds: int = 0,
):
    """Launch an MPIJob: one Launcher running `command` + `args` + `trainer_args` (mpirun ...), and `workers` Workers.

    Args:
        dataset: Prepared dataset; its URI reaches the launcher as $(KFTRAIN_DATASET_URI).
        model: Where rank 0 writes the model ($(KFTRAIN_MODEL_URI)).
        job: Identity of the created job (JSON), written before waiting.
        run_id: The KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER); names the job.
        task_id: The KFP task id (pass dsl.PIPELINE_TASK_ID_PLACEHOLDER); names the job.
        image: Image of the Launcher and Workers; empty: the Horovod image of this release.
        command: Launcher program, normally mpirun and the trainer (mpirun without -n starts one rank per slot).
        args: Arguments appended to command; $(VAR) references are expanded.
        trainer_args: More arguments appended to args (epochs, learning rate...).
        workers: Number of Worker replicas (each hosts slots_per_worker ranks).
        slots_per_worker: MPI slots (ranks) per Worker, written to the hostfile.
        restart_policy: Never, OnFailure, Always or ExitCode (of every replica).
        backoff_limit: Restarts allowed across the job before it fails.
        active_deadline_seconds: Fail the job after this many seconds (0: no limit).
        clean_pod_policy: All, Running or None: which pods to delete when the job ends.
        launcher_creation_policy: v2beta1 only: AtStartup or WaitForWorkersReady; empty: operator default.
        run_launcher_as_worker: v2beta1 only: the Launcher also hosts ranks (its slots join the hostfile).
        ssh_auth_mount_path: v2beta1 only: where the SSH keys are mounted; empty: operator default.
        mpi_implementation: v2beta1 only: OpenMPI, Intel or MPICH (hostfile format and env); empty: OpenMPI.
        api_version: kubeflow.org/v2beta1 (mpi-operator) or kubeflow.org/v1 (training-operator).
        env: Extra environment variables of every replica.
        cpu: CPU request and limit of each replica (e.g. "2"); empty: none.
        memory: Memory request and limit of each replica (e.g. "4Gi"); empty: none.
        gpus: nvidia.com/gpu limit of each replica.
        manifest: A full MPIJob YAML; when given it replaces the typed inputs above.
        checkpoint_uri: Checkpoint root; empty: next to the model.
        backend: auto (kubernetes in a pod, else local), local or kubernetes.
        timeout_seconds: Fail and delete the job after this many seconds (0: no limit).
    """
    from kftrain import images
    from kftrain.errors import KftrainError
    from kftrain.job import JobKind, JobSpec
    from kftrain.job.kinds import kind_spec
    from kftrain.job.model import LauncherCreationPolicy, MPIImplementation
    from kftrain.launch import fail_step, launch_component
    from kftrain.predictors import model_info
    from kftrain.storage import output_uri

    try:
        kspec = kind_spec(JobKind.MPIJOB, api_version)  # rejects a version no operator serves
        v2_only = {
            "launcher_creation_policy": launcher_creation_policy,
            "run_launcher_as_worker": run_launcher_as_worker,
            "ssh_auth_mount_path": ssh_auth_mount_path,
            "mpi_implementation": mpi_implementation,
        }
        given = [name for name, value in v2_only.items() if value]
        if kspec.version == "v1" and given:
            raise KftrainError(f"{given[0]}: not a field of MPIJob {api_version} (only kubeflow.org/v2beta1 has it)")
        spec = JobSpec(
            slots_per_worker=slots_per_worker,
            launcher_creation_policy=LauncherCreationPolicy(launcher_creation_policy)
            if launcher_creation_policy
            else None,
            run_launcher_as_worker=True if run_launcher_as_worker else None,
            ssh_auth_mount_path=ssh_auth_mount_path or None,
            mpi_implementation=MPIImplementation(mpi_implementation) if mpi_implementation else None,
        )
    except (KftrainError, ValueError) as exc:
        fail_step(str(exc))
    model.uri = output_uri(model.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
    inputs, result = launch_component(
        kind=JobKind.MPIJOB, run_id=run_id, task_id=task_id, image=image, default_image=images.image(images.HOROVOD),
        command=command, args=args, trainer_args=trainer_args, workers=workers, restart_policy=restart_policy,
        backoff_limit=backoff_limit, active_deadline_seconds=active_deadline_seconds, clean_pod_policy=clean_pod_policy,
        env=env, cpu=cpu, memory=memory, gpus=gpus, manifest=manifest, dataset_uri=dataset.uri, model_uri=model.uri,
        checkpoint_uri=checkpoint_uri, backend=backend, timeout_seconds=timeout_seconds, identity_path=job,
        spec=spec, api_version=kspec.api_version,
    )  # fmt: skip
    try:
        framework = str(model_info(model.uri).get("framework", ""))  # what the trainer wrote in model.json
    except KftrainError:
        framework = ""
    hosts = workers + (1 if run_launcher_as_worker else 0)
    model.metadata.update(
        {
            "framework": framework,
            "job": inputs.name,
            "api_version": api_version,
            "slots": hosts * slots_per_worker,
            "duration_s": round(result.duration_s, 1),
        }
    )

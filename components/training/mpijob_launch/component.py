"""KFP component: run an MPIJob (a Launcher running mpirun + Workers hosting the ranks); fail the step when it fails."""

from kftrain_components.training.launch_inputs import Input, launch_component

mpijob_launch = launch_component(
    kind="MPIJob",
    name="mpijob_launch",
    module=__name__,
    summary="Launch an MPIJob: one Launcher running `command` + `args` (mpirun ...), and `workers` Workers.",
    replicas=[
        Input("workers", int, 2, "Number of Worker replicas (each hosts slots_per_worker ranks)."),
        Input("slots_per_worker", int, 1, "MPI slots (ranks) per Worker, written to the hostfile."),
    ],
    options=[
        Input("launcher_creation_policy", str, "", "v2beta1 only: AtStartup or WaitForWorkersReady; empty: default."),
        Input("run_launcher_as_worker", bool, False, "v2beta1 only: the Launcher also hosts ranks (in the hostfile)."),
        Input("ssh_auth_mount_path", str, "", "v2beta1 only: where the SSH keys are mounted; empty: operator default."),
        Input("mpi_implementation", str, "", "v2beta1 only: OpenMPI, Intel or MPICH (hostfile format and env)."),
        Input("api_version", str, "kubeflow.org/v2beta1", "kubeflow.org/v2beta1 (mpi-operator) or kubeflow.org/v1."),
    ],
    overrides=[
        Input(
            "command",
            list,
            [],
            "Launcher program (mpirun ...); empty: mpirun of this release's Horovod trainer, one rank per slot.",
        ),
        Input("shm_size", str, "2Gi", "Size of a memory-backed /dev/shm on each Worker (never the Launcher's)."),
    ],
)

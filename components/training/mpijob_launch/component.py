"""Launch an MPIJob: one Launcher running `command` + `args` (mpirun ...) and `workers` Workers hosting the ranks.

With no `command`, the Launcher runs mpirun of this release's Horovod trainer, one rank per slot.
"""

from kftrain_components.training.launch_inputs import Input, launch_component

mpijob_launch = launch_component(
    __name__,
    Input("workers", int, 2, "Number of Worker replicas (each hosts slots_per_worker ranks)."),
    Input("slots_per_worker", int, 1, "MPI slots (ranks) per Worker, written to the hostfile."),
    Input("api_version", str, "kubeflow.org/v2beta1", "kubeflow.org/v2beta1 (mpi-operator) or kubeflow.org/v1."),
    Input("launcher_creation_policy", str, "", "v2beta1 only: AtStartup or WaitForWorkersReady; empty: default."),
    Input("run_launcher_as_worker", bool, False, "v2beta1 only: the Launcher also hosts ranks (in the hostfile)."),
    Input("ssh_auth_mount_path", str, "", "v2beta1 only: where the SSH keys are mounted; empty: operator default."),
    Input("mpi_implementation", str, "", "v2beta1 only: OpenMPI, Intel or MPICH (hostfile format and env)."),
    shm_size="2Gi",  # on the Workers, where the ranks run; never on the Launcher
)

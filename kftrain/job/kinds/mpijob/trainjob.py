"""An MPIJob as a Kubeflow Trainer v2 TrainJob on an MPI runtime whose launcher runs as a node (default
``deepspeed-distributed``): ``numNodes`` = the MPIJob's hosts (Workers, plus the Launcher with
``runLauncherAsWorker``), ``numProcPerNode`` = ``slotsPerWorker``, the Launcher's container the trainer."""

from __future__ import annotations

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import Kind
from kftrain.job.kinds.mpijob.kind import spec
from kftrain.job.kinds.mpijob.spec import MPIImplementation
from kftrain.job.kinds.trainjob.convert import Conversion, TrainerSource, convert
from kftrain.job.kinds.trainjob.policies import MPI_RESERVED
from kftrain.job.kinds.trainjob.runtime import LAUNCHER
from kftrain.job.model import TrainingJob

DEFAULT_RUNTIME = "deepspeed-distributed"


def to_trainjob(kind: Kind, job: TrainingJob, runtime: str | None) -> Conversion:
    mpi = spec(job)
    if mpi.mpi_implementation not in (None, MPIImplementation.OPENMPI):
        raise JobSpecError(
            "spec.mpiImplementation", f"{mpi.mpi_implementation.value}: Trainer v2.3.0 runs OpenMPI only"
        )
    first = kind.main_container(job, "Worker") if "Worker" in job.replica_specs else None
    image = first.image if first else None
    notes = [
        "Worker pods: the runtime's node job runs its own image and ssh daemon"
        + (f" (your Worker image {image} is not used)" if image else "")
        + "; to run yours, give a TrainingRuntime of your own"
    ]
    if mpi.ssh_auth_mount_path:
        notes.append(f"sshAuthMountPath {mpi.ssh_auth_mount_path}: the runtime's mlPolicy.mpi decides it")
    if mpi.launcher_creation_policy is not None:
        notes.append("launcherCreationPolicy: the runtime's dependsOn decides when the launcher starts")
    source = TrainerSource(
        replica_type="Launcher",
        container=kind.main_container(job, "Launcher"),
        runtime=runtime or DEFAULT_RUNTIME,
        trainer={
            "numNodes": job.replicas_of("Worker") + (1 if mpi.run_launcher_as_worker else 0),
            "numProcPerNode": mpi.slots_per_worker or 1,
        },
        reserved_env=MPI_RESERVED,
        patched_job=LAUNCHER,
        notes=notes,
    )
    return convert(job, source)

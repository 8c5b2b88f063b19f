"""An MPIJob's own ``spec`` fields: mpi-operator v0.8.2's ``kubeflow.org/v2beta1``
(``pkg/apis/kubeflow/v2beta1/types.go``) and training-operator v1.9.0's ``kubeflow.org/v1``
(``pkg/apis/kubeflow.org/v1/mpi_types.go``)."""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.compat import StrEnum
from kftrain.job.model import CleanPodPolicy, JobSpec
from kftrain.job.serde import INT32, json_field


class MPIImplementation(StrEnum):
    OPENMPI = "OpenMPI"
    INTEL = "Intel"
    MPICH = "MPICH"


class LauncherCreationPolicy(StrEnum):
    AT_STARTUP = "AtStartup"
    WAIT_FOR_WORKERS_READY = "WaitForWorkersReady"


@dataclass
class MPIJobSpec(JobSpec):
    """Both versions' fields; which ones a version accepts is its KindSpec's ``spec_fields``."""

    slots_per_worker: int | None = json_field("slotsPerWorker", bits=INT32)
    # v2beta1 only
    ssh_auth_mount_path: str | None = json_field("sshAuthMountPath")
    launcher_creation_policy: LauncherCreationPolicy | None = json_field("launcherCreationPolicy")
    run_launcher_as_worker: bool | None = json_field("runLauncherAsWorker")
    mpi_implementation: MPIImplementation | None = json_field("mpiImplementation")
    # v1 only: the worker container `kubectl exec` runs the ranks in (the launcher's contract goes in its first
    # container), and a cleanPodPolicy beside runPolicy's
    main_container: str | None = json_field("mainContainer")
    clean_pod_policy: CleanPodPolicy | None = json_field("cleanPodPolicy")

"""The launch inputs an MPIJob adds, and this release's Horovod (PyTorch) program under mpirun."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeVar

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds import programs
from kftrain.job.kinds.base import GROUP
from kftrain.job.kinds.mpijob.spec import LauncherCreationPolicy, MPIImplementation, MPIJobSpec
from kftrain.job.kinds.options import KindOptions, Program, launch_input

V2BETA1 = f"{GROUP}/v2beta1"
V1 = f"{GROUP}/v1"
E = TypeVar("E", bound=enum.Enum)


def _enum(enum_type: type[E], value: str, field_name: str) -> E:
    """``value`` as a member of ``enum_type``, or an error naming the input and the allowed values."""
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_type)
        raise JobSpecError(field_name, f"{value!r} is not one of: {allowed}") from None


@dataclass
class MPIJobOptions(KindOptions):
    """One Launcher running mpirun and ``workers`` Workers hosting ``slots_per_worker`` ranks each."""

    # On the Workers, where the ranks run; never on the Launcher.
    INPUT_DEFAULTS = {"shm_size": "2Gi"}

    workers: int = launch_input(2, "Number of Worker replicas (each hosts slots_per_worker ranks).")
    slots_per_worker: int = launch_input(1, "MPI slots (ranks) per Worker, written to the hostfile.")
    api_version: str = launch_input(V2BETA1, f"{V2BETA1} (mpi-operator) or {V1}.")
    launcher_creation_policy: str = launch_input("", "v2beta1 only: AtStartup or WaitForWorkersReady; empty: default.")
    run_launcher_as_worker: bool = launch_input(False, "v2beta1 only: the Launcher also hosts ranks (in the hostfile).")
    ssh_auth_mount_path: str = launch_input(
        "", "v2beta1 only: where the SSH keys are mounted; empty: operator default."
    )
    mpi_implementation: str = launch_input("", "v2beta1 only: OpenMPI, Intel or MPICH (hostfile format and env).")

    def validate(self) -> None:
        if self.api_version not in (V2BETA1, V1):
            raise JobSpecError(
                "api_version", f"{self.api_version!r} is not served for MPIJob; expected {V2BETA1} or {V1}"
            )
        self.workers = check.integer("workers", self.workers, low=0, high=check.INT32_MAX)
        self.slots_per_worker = check.integer("slots_per_worker", self.slots_per_worker, low=1, high=check.INT32_MAX)
        if self.slots() > check.INT32_MAX:  # the hostfile's slots are ranks, and mpirun's -np an int32
            raise JobSpecError("slots_per_worker", f"workers x slots_per_worker is more than {check.INT32_MAX} ranks")
        if self.ssh_auth_mount_path:
            check.mount_path("ssh_auth_mount_path", self.ssh_auth_mount_path)
        v2_only = {
            "launcher_creation_policy": self.launcher_creation_policy,
            "run_launcher_as_worker": self.run_launcher_as_worker,
            "ssh_auth_mount_path": self.ssh_auth_mount_path,
            "mpi_implementation": self.mpi_implementation,
        }
        given = [name for name, value in v2_only.items() if value]
        if self.api_version == V1 and given:
            raise JobSpecError(given[0], f"not a field of MPIJob {V1} (only {V2BETA1} has it)")
        self.spec()  # the enumerations

    def replica_counts(self) -> dict[str, int]:
        return {"Worker": self.workers}

    def spec(self) -> MPIJobSpec:
        return MPIJobSpec(
            slots_per_worker=self.slots_per_worker,
            launcher_creation_policy=(
                _enum(LauncherCreationPolicy, self.launcher_creation_policy, "launcher_creation_policy")
                if self.launcher_creation_policy
                else None
            ),
            run_launcher_as_worker=True if self.run_launcher_as_worker else None,
            ssh_auth_mount_path=self.ssh_auth_mount_path or None,
            mpi_implementation=(
                _enum(MPIImplementation, self.mpi_implementation, "mpi_implementation")
                if self.mpi_implementation
                else None
            ),
        )

    def slots(self) -> int:
        return (self.workers + (1 if self.run_launcher_as_worker else 0)) * self.slots_per_worker

    def default_program(self, runtimes: Any = None) -> Program:
        return programs.HOROVOD_TORCH_MPIRUN

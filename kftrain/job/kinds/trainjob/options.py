"""The launch inputs a TrainJob adds, and this release's program on the runtime it names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain import images
from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds.base import KindOptions, Program, Workload, launch_input
from kftrain.job.model import TrainingJob


@dataclass
class TrainJobOptions(KindOptions):
    """A Kubeflow Trainer v2 TrainJob: the runtime it runs on, its nodes, and processes per node."""

    # PyTorch's data loader workers and NCCL share memory through /dev/shm.
    INPUT_DEFAULTS = {"shm_size": "2Gi"}
    # A TrainJob has no field for these: its runtime's JobSet decides them (the webhook's API has none).
    OMITTED_INPUTS = ("restart_policy", "backoff_limit", "clean_pod_policy", "ttl_seconds_after_finished", "scheduling")

    runtime: str = launch_input("torch-distributed", "The ClusterTrainingRuntime to run on.")
    num_nodes: int = launch_input(2, "Number of nodes (pods) of the trainer.")
    num_proc_per_node: int = launch_input(1, "Processes per node (torch: torchrun's; MPI: slots); 0: the runtime's.")

    def validate(self) -> None:
        if not self.runtime:
            raise JobSpecError("runtime", "missing: the ClusterTrainingRuntime to run on")
        check.name("runtime", self.runtime)
        self.num_nodes = check.integer("num_nodes", self.num_nodes, low=1, high=check.INT32_MAX)
        self.num_proc_per_node = check.integer("num_proc_per_node", self.num_proc_per_node, low=0, high=check.INT32_MAX)

    def build(self, name: str, workload: Workload, runtimes: Any = None) -> TrainingJob | None:
        from kftrain.job.kinds.trainjob.kind import load_trainjob
        from kftrain.job.kinds.trainjob.runtime import API_VERSION

        trainer: dict[str, object] = {"numNodes": self.num_nodes}
        if self.num_proc_per_node:
            trainer["numProcPerNode"] = self.num_proc_per_node
        if workload.image:
            trainer["image"] = workload.image
        trainer["command"] = list(workload.command)
        if workload.args:
            trainer["args"] = list(workload.args)
        if workload.env:
            trainer["env"] = [{"name": k, "value": str(v)} for k, v in workload.env.items()]
        spec: dict[str, object] = {"runtimeRef": {"name": self.runtime}, "trainer": trainer}
        if workload.active_deadline_seconds:
            spec["activeDeadlineSeconds"] = workload.active_deadline_seconds
        manifest = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": {"name": name}, "spec": spec}
        return load_trainjob(manifest, runtimes)

    def default_program(self, runtimes: Any = None) -> Program:
        # On an MPI runtime, mpirun of the Horovod program (as an MPIJob's); on a torch runtime, torchrun turns the
        # runtime's PET_* variables into the DDP program's RANK/WORLD_SIZE/MASTER_ADDR.
        from kftrain.job.kinds.mpijob.options import MPIJobOptions
        from kftrain.job.kinds.pytorchjob.options import PROGRAM
        from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
        from kftrain.job.kinds.trainjob.runtime import CLUSTER_RUNTIME

        catalog = runtimes if runtimes is not None else RuntimeCatalog()
        if self.runtime and catalog.find(CLUSTER_RUNTIME, self.runtime).framework == "mpi":
            return MPIJobOptions().default_program()
        return Program(images.PYTORCH, ("torchrun", "-m", PROGRAM))

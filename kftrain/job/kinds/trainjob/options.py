"""The launch inputs a TrainJob adds, and this release's program on the runtime it names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds import programs
from kftrain.job.kinds.options import KindOptions, Program, Workload, launch_input
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
    runtime_manifest: str = launch_input(
        "",
        "YAML of the TrainingRuntime (or ClusterTrainingRuntime) named by runtime, applied with the job: on a cluster "
        "a TrainingRuntime the namespace lacks is created, one it has must match; empty: the cluster has it.",
    )

    def validate(self) -> None:
        if not self.runtime:
            raise JobSpecError("runtime", "missing: the ClusterTrainingRuntime to run on")
        check.name("runtime", self.runtime)
        self.num_nodes = check.integer("num_nodes", self.num_nodes, low=1, high=check.INT32_MAX)
        self.num_proc_per_node = check.integer("num_proc_per_node", self.num_proc_per_node, low=0, high=check.INT32_MAX)

    def catalog(self, runtimes: Any = None) -> Any:
        """The runtimes this job may name: ``runtimes`` (None: those Trainer installs), with :attr:`runtime_manifest`'s
        over them."""
        from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog, bundled_catalog
        from kftrain.job.manifest.parse import parse_yaml_documents

        base = runtimes if runtimes is not None else RuntimeCatalog()
        if not self.runtime_manifest.strip():
            return base
        docs = list(enumerate(parse_yaml_documents(self.runtime_manifest, "runtime_manifest")))
        if not docs or any(not isinstance(d, dict) for _, d in docs):
            raise JobSpecError("runtime_manifest", "must be YAML of a TrainingRuntime or ClusterTrainingRuntime")
        return bundled_catalog(docs, "runtime_manifest", base)

    def _runtime(self, runtimes: Any) -> Any:
        """The runtime named by :attr:`runtime`: the manifest's when given, else a ClusterTrainingRuntime."""
        from kftrain.job.kinds.trainjob.runtime import CLUSTER_RUNTIME

        catalog = self.catalog(runtimes)
        bundled = [r for r in catalog.runtimes() if r.bundled and r.name == self.runtime]
        return bundled[0] if bundled else catalog.find(CLUSTER_RUNTIME, self.runtime)

    def build(self, name: str, workload: Workload, runtimes: Any = None) -> TrainingJob | None:
        from kftrain.job.kinds.trainjob.kind import load_trainjob
        from kftrain.job.kinds.trainjob.runtime import API_VERSION

        runtime = self._runtime(runtimes)
        trainer: dict[str, object] = {"numNodes": self.num_nodes}
        if self.num_proc_per_node:
            trainer["numProcPerNode"] = self.num_proc_per_node
        if workload.image:
            trainer["image"] = workload.image
        trainer["command"] = list(workload.command)
        if workload.args:
            trainer["args"] = list(workload.args)
        env = dict(workload.env)
        if runtime.framework == "plain":
            # kftrain.programs.tf_config builds TF_CONFIG from it: a plain runtime tells a node nothing of the others.
            env.setdefault("KFTRAIN_NUM_NODES", str(self.num_nodes))
        if env:
            trainer["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
        spec: dict[str, object] = {"runtimeRef": {"kind": runtime.kind, "name": self.runtime}, "trainer": trainer}
        if workload.active_deadline_seconds:
            spec["activeDeadlineSeconds"] = workload.active_deadline_seconds
        manifest = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": {"name": name}, "spec": spec}
        return load_trainjob(manifest, self.catalog(runtimes))

    def default_program(self, runtimes: Any = None) -> Program:
        # On an MPI runtime, mpirun of the Horovod program (as an MPIJob's); on a plain runtime, the TensorFlow program
        # (MultiWorkerMirrored, its TF_CONFIG built from KFTRAIN_NUM_NODES); on a torch runtime, torchrun turns the
        # runtime's PET_* variables into the DDP program's RANK/WORLD_SIZE/MASTER_ADDR.
        framework = self._runtime(runtimes).framework if self.runtime else "torch"
        if framework == "mpi":
            return programs.HOROVOD_TORCH_MPIRUN
        if framework == "plain":
            return programs.TF_DISTRIBUTED
        return programs.TORCH_DDP_TORCHRUN_M

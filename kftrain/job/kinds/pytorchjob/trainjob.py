"""A PyTorchJob as a Kubeflow Trainer v2 TrainJob on a torch runtime (default ``torch-distributed``).

Its replicas (Master and Workers) become ``numNodes``, the main container of the Master (else the first Worker)
the trainer, a numeric ``nprocPerNode`` its ``numProcPerNode``; a command that is not torchrun goes through
``torchrun --no-python`` (:mod:`kftrain.job.kinds.trainjob.convert`).
"""

from __future__ import annotations

from kftrain.job.kinds.base import Kind
from kftrain.job.kinds.pytorchjob.kind import spec
from kftrain.job.kinds.trainjob.convert import Conversion, TrainerSource, convert
from kftrain.job.kinds.trainjob.policies import TORCH_RESERVED
from kftrain.job.kinds.trainjob.runtime import NODE
from kftrain.job.model import TrainingJob

DEFAULT_RUNTIME = "torch-distributed"


def to_trainjob(kind: Kind, job: TrainingJob, runtime: str | None) -> Conversion:
    notes: list[str] = []
    trainer: dict[str, object] = {"numNodes": sum(rspec.count for rspec in job.replica_specs.values())}
    nproc = spec(job).nproc_per_node
    if nproc is not None and nproc.isdigit():
        trainer["numProcPerNode"] = int(nproc)
    elif nproc is not None:
        notes.append(f"nprocPerNode {nproc!r}: Trainer v2.3.0 takes a number; unset, it derives auto itself")
    if spec(job).elastic_policy is not None:
        notes.append("elasticPolicy: Trainer v2.3.0 has no elastic training; the TrainJob has a fixed numNodes")
    replica_type = "Master" if "Master" in job.replica_specs else "Worker"
    source = TrainerSource(
        replica_type=replica_type,
        container=kind.main_container(job, replica_type),
        runtime=runtime or DEFAULT_RUNTIME,
        trainer=trainer,
        reserved_env=TORCH_RESERVED,
        patched_job=NODE,
        through_torchrun=True,
        same_pods=True,
        notes=notes,
    )
    return convert(job, source)

"""The env a TrainJob node's main container ends with, as the tests compare it: the trainer's, then what the kind's
ML policy plugin adds (:meth:`~kftrain.job.kinds.base.Kind.operator_env`), on a topology of fixed ports."""

from __future__ import annotations

from pathlib import Path

from kftrain.job.kinds import kind_of
from kftrain.job.model import TrainingJob
from kftrain.job.topology import ReplicaId, Topology


def node_env(job: TrainingJob, replica: ReplicaId) -> dict[str, str]:
    """The env of ``replica``'s ``node`` container after the plugins: the trainer's, then the plugin's, in order."""
    kind = kind_of(job)
    topology = Topology(ports={r: 29500 for r in kind.listening_replicas(job)}, files_root=Path("/"))
    container = next(c for c in job.replica_specs[replica.type].template.spec.containers if c.name == "node")
    env = {v.name: v.value or "" for v in container.env or []}
    env.update(kind.operator_env(job, replica, topology))
    return env

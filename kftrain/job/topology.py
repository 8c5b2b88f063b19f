"""Replicas of a job and where they are: the identity of each replica, and the addresses they reach each other at.

A replica is ``(type, index)``; its label (``worker-1``) is the suffix the operators give its pod and the
prefix of its log lines. A :class:`Topology` says where each replica listens: on a cluster that is the pod's
DNS name and the operator's port; on one machine every replica is ``localhost`` with a free port.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kftrain.job.model import TrainingJob

LOCAL_HOST = "localhost"


@dataclass(frozen=True, order=True)
class ReplicaId:
    type: str
    index: int

    @property
    def label(self) -> str:
        """``worker-1``: the suffix of the pod name, and the prefix of every log line."""
        return f"{self.type.lower()}-{self.index}"


@dataclass(frozen=True)
class StatusEndpoint:
    """Where a node posts its progress (Kubeflow Trainer's status server), and the files it authenticates with."""

    url: str
    ca_cert: str
    token: str


@dataclass
class Topology:
    """Where each replica listens, and where the operator's mounted files (the MPI hostfile) are."""

    ports: dict[ReplicaId, int] = field(default_factory=dict)
    host: str = LOCAL_HOST
    # The root under which files the operator mounts at absolute paths (/etc/mpi/hostfile) are found.
    files_root: Path = Path("/")
    # The name each replica's host goes by in the files the operator writes; None: its pod's name.
    host_of: Callable[[ReplicaId], str] | None = None
    # The progress endpoint the nodes are told of (a TrainJob's); None: none.
    status: StatusEndpoint | None = None

    def address(self, replica: ReplicaId) -> str:
        return f"{self.host}:{self.ports[replica]}"

    def file(self, absolute: str) -> Path:
        """Where a file the operator mounts at ``absolute`` is found here."""
        return self.files_root / absolute.lstrip("/")


def all_replicas(job: TrainingJob) -> list[ReplicaId]:
    return [ReplicaId(rtype, i) for rtype, spec in job.replica_specs.items() for i in range(spec.count)]


def total_replicas(job: TrainingJob) -> int:
    return sum(spec.count for spec in job.replica_specs.values())

"""Workers that run no program of their own here (an MPIJob's): they only host ranks the launcher starts.

On a cluster such a worker is a pod, and the operator keeps files about the running ones current (a v1
MPIJob's ``discover_hosts.sh``, :meth:`kftrain.job.kinds.Kind.membership_files`). On one machine the backend
keeps the list of "running" ones, rewrites those files when it changes (:func:`write_mounted`: atomically, as
the kubelet swaps a ConfigMap volume, since horovodrun may run the script at any moment), and losing such a
worker stops the ranks placed on it (:func:`ranks_on`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import psutil

from kftrain.backends.local.processes import process_tree
from kftrain.job.kinds.base import MountedFile
from kftrain.job.topology import Topology

# horovodrun gives every rank it starts the host it placed the rank on.
RANK_HOST_VAR = "HOROVOD_HOSTNAME"


def write_mounted(topology: Topology, files: Mapping[str, MountedFile]) -> None:
    """Write each file where ``topology`` finds it, replacing any previous content in one rename."""
    for absolute, mounted in files.items():
        path = topology.file(absolute)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        staging.write_text(mounted.content)
        staging.chmod(mounted.mode)
        os.replace(staging, path)


def ranks_on(root_pid: int, host: str) -> list[psutil.Process]:
    """The processes under ``root_pid`` (a launcher's tree) that were placed on ``host``."""
    placed = []
    for proc in process_tree(root_pid):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(RANK_HOST_VAR) == host:
                placed.append(proc)
    return placed

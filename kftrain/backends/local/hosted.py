"""Workers that run no program of their own here (an MPIJob's): they only host ranks the launcher starts.

On a cluster such a worker is a pod, and the operator keeps files about the running ones current (a v1
MPIJob's ``discover_hosts.sh``, :meth:`kftrain.job.kinds.Kind.membership_files`). On one machine the backend
keeps the list of "running" ones (:func:`scale_hosted`), rewrites those files when it changes (:func:`write_mounted`:
atomically, as the kubelet swaps a ConfigMap volume, since horovodrun may run the script at any moment), and losing
such a worker (:func:`lose_hosted`) stops the ranks placed on it (:func:`ranks_on`).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping

import psutil

from kftrain.backends.console import Console
from kftrain.backends.local.one_machine import local_worker_host
from kftrain.backends.local.processes import process_tree
from kftrain.backends.local.running import RunningJob
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.base import MountedFile
from kftrain.job.topology import ReplicaId, Topology

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


def scale_hosted(state: RunningJob, workers: int, console: Console) -> None:
    """Workers without a program of their own: new ones get indices never used before in this job (a lost
    worker's host may be blacklisted by horovodrun), the highest go first."""
    while len(state.hosted) < workers:
        added = ReplicaId("Worker", state.next_hosted)
        state.next_hosted += 1
        state.hosted.append(added)
        console.say(f"scaled Worker up: {added.label} hosts ranks")
    while len(state.hosted) > workers:
        gone = state.hosted.pop()
        console.say(f"scaled Worker down: {gone.label} removed")
    state.job.replica_specs["Worker"].replicas = workers
    update_membership(state)


def update_membership(state: RunningJob) -> None:
    """The operator's files that list the running hosted workers, rewritten for those running now."""
    write_mounted(state.topology, kind_of(state.job).membership_files(state.job, state.topology, state.hosted))


def lose_hosted(state: RunningJob, label: str, sig: signal.Signals, console: Console) -> bool:
    """The hosted worker ``label`` is lost: it leaves the operator's files and ``sig`` goes to the ranks the launcher
    placed on it. False: no hosted worker has that label."""
    hosted = next((w for w in state.hosted if w.label == label), None)
    if hosted is None:
        return False
    state.hosted.remove(hosted)
    update_membership(state)
    host = local_worker_host(hosted.index)
    ranks = [p for r in state.replicas if r.proc is not None for p in ranks_on(r.proc.pid, host)]
    for proc in ranks:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    console.say(f"lost {label} (host {host}): signalled {len(ranks)} rank process(es) on it")
    return True

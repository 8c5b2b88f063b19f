"""What the operator's contract needs when every replica is a process on this machine rather than a pod of its own.

From what the kinds say their replicas do (:class:`~kftrain.job.kinds.Kind`): an mpirun whose every slot is here
needs no remote shell (and, as root, OpenMPI's flags); every replica is ``localhost``, so the c10d rendezvous host
is said explicitly (``is_host`` in ``PET_RDZV_CONF``); workers that only host ranks get distinct names resolving here
(:func:`local_worker_host`); and a program learns it runs here: ``KFTRAIN_BACKEND=local``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from kftrain.contract import BACKEND_ENV
from kftrain.job import TrainingJob
from kftrain.job.kinds import Kind
from kftrain.job.topology import ReplicaId


def adapt_env(kind: Kind, job: TrainingJob, replica: ReplicaId, env: dict[str, str]) -> None:
    """Adjust ``env`` for ``replica`` running here rather than in its own pod."""
    env[BACKEND_ENV] = "local"
    if kind.runs_mpirun(job, replica):
        local_mpirun_env(env)
    host = kind.rendezvous_host(job)
    if host is not None:
        conf = [c for c in env.get("PET_RDZV_CONF", "").split(",") if c and not c.startswith("is_host=")]
        env["PET_RDZV_CONF"] = ",".join([*conf, f"is_host={'true' if replica == host else 'false'}"])


def local_mpirun_env(env: dict[str, str]) -> None:
    """What an mpirun whose every slot is on this machine needs in ``env``."""
    if os.geteuid() == 0:
        # mpirun refuses root without these; MPI images set them the same way.
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if not any(shutil.which(tool, path=env.get("PATH")) for tool in ("ssh", "rsh")):
        # Every slot is on localhost, so mpirun never starts a remote daemon; but OpenMPI 4 refuses to start
        # at all when its rsh launch agent (ssh or rsh) is missing. Any existing program satisfies that check.
        env.setdefault("OMPI_MCA_plm_rsh_agent", shutil.which("false") or "/bin/false")


def local_worker_host(index: int) -> str:
    """Worker ``index``'s host name on one machine: 127.0.0.1 with ``index`` zeros before its last digit.

    Each is a distinct name (horovodrun tells the workers apart by name, a failed host is blacklisted, and a
    host's slots are its own) that resolves to 127.0.0.1 (so horovodrun starts its ranks here, without ssh); the
    leading zeros are read as the same octet. horovodrun gives each rank its host as ``HOROVOD_HOSTNAME``.
    """
    return "127.0.0." + "0" * index + "1"


def local_host_of(host: str) -> Callable[[ReplicaId], str]:
    """The topology's ``host_of`` here: each Worker by :func:`local_worker_host`, every other replica ``host``."""

    def host_of(replica: ReplicaId) -> str:
        return local_worker_host(replica.index) if replica.type == "Worker" else host

    return host_of

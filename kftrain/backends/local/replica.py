"""A replica on this machine: the program it runs and the environment it gets, as its pod would.

The environment is built in the kubelet's order: this process's environment without the variables of
the operators' contracts (a stale ``RANK`` from the launching shell must not leak in), the config's extra
variables, the container's ``env`` (``$(VAR)`` references expanded, ``valueFrom`` resolved), then the
operator's contract for this replica (:meth:`kftrain.job.kinds.Kind.operator_env`) and the kind's local
adjustments. Images are ignored: the container's ``python`` is this interpreter, and the folder of this
interpreter leads ``PATH`` (so ``torchrun`` or ``mpirun`` installed beside it are found).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.backends.local.config import ALL_REPLICA_TYPES, LocalConfig
from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import RestartPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology

# Variables of the operators' contracts: never inherited from the launching shell, only set per replica.
_CONTRACT_VARS = re.compile(
    r"^(TF_CONFIG|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|"
    r"PET_.*|TORCHELASTIC_.*|K_MPI_JOB_ROLE|OMPI_COMM_WORLD_.*|OMPI_MCA_orte_default_hostfile|"
    r"OMPI_MCA_orte_set_default_slots|I_MPI_HYDRA_HOST_FILE|HYDRA_HOST_FILE)$"
)
_K8S_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_PYTHON_NAMES = {"python", "python3", f"python3.{sys.version_info.minor}"}


@dataclass
class LocalReplica:
    """One replica's program and environment, and the state of its process."""

    id: ReplicaId
    argv: list[str]
    env: dict[str, str]
    policy: RestartPolicy
    tail: collections.deque[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    restarts: int = 0
    restart_at: float | None = None
    succeeded: bool = False
    finished: bool = False
    last_exit: int | None = None


def expand_k8s_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command, args and env values; ``$$`` escapes a ``$``."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _K8S_VAR_REF.sub(repl, text)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare_replica(
    job: TrainingJob, rid: ReplicaId, topology: Topology, config: LocalConfig, logs_dir: Path
) -> LocalReplica:
    """The program and environment of ``rid``; a missing program or secret is a :class:`JobSpecError`."""
    kind = kind_of(job)
    container = main_container(job, rid.type)
    path = f"{kind.replicas_path()}.{rid.type}.template.spec.containers"
    if container is None:
        raise JobSpecError(path, "missing: every replica needs a container")
    env = {k: v for k, v in os.environ.items() if not _CONTRACT_VARS.match(k)}
    env.update(config.extra_env)
    # Tools installed beside this Python (torchrun, mpirun from a venv) are the image's tools.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    pod_name = f"{job.name}-{rid.label}"
    for var in container.env or []:
        if var.value_from is not None:
            value = _resolve_value_from(var.name, var.value_from, pod_name, job, f"{path}.env")
            if value is not None:
                env[var.name] = value
        else:
            env[var.name] = expand_k8s_vars(var.value or "", env)
    env.update(kind.operator_env(job, rid, topology))
    kind.adapt_local_env(job, rid, env)
    override = config.commands.get(rid.type) or config.commands.get(ALL_REPLICA_TYPES)
    if override:
        argv = list(override)
    elif container.command:
        argv = [*container.command, *(container.args or [])]
    else:
        raise JobSpecError(
            f"{path}[{container.name}].command",
            f"missing: locally the image's entrypoint is not available; give --command "
            f"(or --command {rid.type}=...) with the program to run",
        )
    argv = [expand_k8s_vars(a, env) for a in argv]
    # A file the operator mounts (/etc/mpi/discover_hosts.sh) named on the command line is found under the workdir.
    mounted = {path: str(topology.file(path)) for path in kind.operator_files(job, topology)}
    argv = [mounted.get(a, a) for a in argv]
    if argv[0] in _PYTHON_NAMES:
        argv[0] = sys.executable  # the image's python is this environment's python
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise JobSpecError(f"{path}[{container.name}].command", f"program {argv[0]!r} not found on PATH")
    return LocalReplica(
        id=rid,
        argv=argv,
        env=env,
        policy=kind.restart_policy(job, rid.type),
        tail=collections.deque(maxlen=config.log_tail_lines),
        log_path=logs_dir / f"{rid.label}.log",
    )


def _resolve_value_from(name: str, source: Mapping[str, Any], pod_name: str, job: TrainingJob, path: str) -> str | None:
    """A ``valueFrom`` as this machine can answer it: the pod's own fields, else this process's ``name``.

    An optional reference this machine cannot answer leaves the variable unset, as a missing optional secret
    does in a pod; a required one is an error naming the variable.
    """
    field_ref = source.get("fieldRef")
    if isinstance(field_ref, Mapping):
        fields = {
            "metadata.name": pod_name,
            "metadata.namespace": job.metadata.namespace or "default",
            "status.podIP": "127.0.0.1",
            "spec.nodeName": socket.gethostname(),
        }
        key = str(field_ref.get("fieldPath"))
        if key in fields:
            return fields[key]
    if name in os.environ:
        return os.environ[name]
    if any(isinstance(ref, Mapping) and ref.get("optional") for ref in source.values()):
        return None
    kind = next(iter(source), "valueFrom")
    raise JobSpecError(
        f"{path}[{name}]",
        f"comes from {kind}, which does not exist on this machine; export {name} to give the value locally",
    )

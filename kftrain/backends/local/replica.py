"""A replica on this machine: the program it runs and the environment it gets, as its pod would.

The environment is built in the kubelet's order: a base (this process's, without the operators' contract variables;
``LocalConfig.clean_env``: only an image's, :func:`image_env`), the config's variables, the container's ``env``, then
the operator's contract (:meth:`kftrain.job.kinds.Kind.operator_env`); ``$(VAR)`` expands as the kubelet does
(:func:`expand_k8s_vars`), from the pod spec's variables only. Images are ignored: ``python`` is this interpreter,
whose folder leads ``PATH``. What would fail to start in a pod fails here before any replica starts, naming the
field: a missing or non-executable program, an environment or arguments over the kernel's limits (E2BIG).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.backends.local.config import ALL_REPLICA_TYPES, LocalConfig
from kftrain.backends.local.one_machine import adapt_env
from kftrain.backends.local.processes import ReplicaProcess
from kftrain.errors import JobSpecError
from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import Container, RestartPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology

# Variables of the operators' contracts: never inherited from the launching shell, only set per replica.
_CONTRACT_VARS = re.compile(
    r"^(TF_CONFIG|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|"
    r"PET_.*|TORCHELASTIC_.*|K_MPI_JOB_ROLE|OMPI_COMM_WORLD_.*|OMPI_MCA_orte_default_hostfile|"
    r"OMPI_MCA_orte_set_default_slots|I_MPI_HYDRA_HOST_FILE|HYDRA_HOST_FILE)$"
)
_PYTHON_NAMES = {"python", "python3", f"python3.{sys.version_info.minor}"}
# Linux refuses a single argument or variable longer than 32 pages (MAX_ARG_STRLEN) with E2BIG.
MAX_ARG_STRLEN = 32 * 4096
# Room for the supervisor's own arguments (the interpreter, its script, the grace period).
_EXEC_HEADROOM = 4096
# An image's PATH (the Docker default), and the variables of this process a clean environment keeps.
_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_IMAGE_KEEPS = ("LC_ALL", "TMPDIR", "TZ")


@dataclass
class LocalReplica:
    """One replica's program and environment, and the state of its process."""

    id: ReplicaId
    argv: list[str]
    env: dict[str, str]
    policy: RestartPolicy
    tail: collections.deque[str]
    log_path: Path
    # SIGTERM, then SIGKILL after this long: the pod's terminationGracePeriodSeconds, else the config's.
    grace_s: float = 5.0
    proc: ReplicaProcess | None = None
    reader: threading.Thread | None = None
    restarts: int = 0
    restart_at: float | None = None
    succeeded: bool = False
    finished: bool = False
    last_exit: int | None = None


class ExpansionTooLarge(ValueError):
    """A ``$(VAR)`` expansion that grew past what a program could be given."""


def expand_k8s_vars(text: str, declared: Mapping[str, str], limit: int | None = None) -> str:
    """``text`` with Kubernetes' ``$(VAR)`` expansion (kubernetes/kubernetes@v1.36.3:
    third_party/forked/golang/expansion/expand.go, ``Expand`` and ``tryReadVariableName``): ``$(NAME)`` is
    ``declared[NAME]``, NAME being everything up to the next ``)``, and is left as written when ``declared`` has no
    NAME; ``$$`` is an escaped ``$``; a ``$`` before anything else, an unclosed ``$(`` and a ``$`` at the end are kept.
    One pass: a value that holds ``$(...)`` is not expanded again.

    ``declared`` is what the kubelet maps names with (:func:`_declared_env`), never the whole environment. With
    ``limit``, an expansion longer than ``limit`` characters raises :class:`ExpansionTooLarge` as soon as it passes
    it: references to references can otherwise grow a short manifest into gigabytes.
    """
    if "$" not in text:
        return text  # no reference: a long literal is for check_exec_size to name
    pieces: list[str] = []
    size = 0
    checkpoint = 0
    cursor = 0
    closer = -2  # where the next ")" is (-1: none left, -2: not looked for yet): each ")" is looked for once
    expanded = False  # a text that only grows by what it references is too large; a long literal is not

    def add(piece: str) -> None:
        nonlocal size
        size += len(piece)
        if limit is not None and size > limit and expanded:
            raise ExpansionTooLarge(f"expands to more than {limit} characters")
        pieces.append(piece)

    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            add(text[checkpoint:cursor])
            after = text[cursor + 1]
            if after == "(" and closer != -1 and closer < cursor + 2:
                closer = text.find(")", cursor + 2)
            if after == "$":
                add("$")  # an escaped operator
            elif after == "(" and closer != -1:
                name = text[cursor + 2 : closer]
                expanded = expanded or name in declared
                add(declared.get(name, f"$({name})"))
                cursor = closer - 1  # the loop's step below puts it past the reference's ")"
            else:
                add("$" + after)  # not a reference: "$x", or "$(" never closed
            cursor += 1
            checkpoint = cursor + 1
        cursor += 1
    add(text[checkpoint:])
    return "".join(pieces)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare_replica(
    job: TrainingJob,
    rid: ReplicaId,
    topology: Topology,
    config: LocalConfig,
    logs_dir: Path,
    scratch: Path | None = None,
) -> LocalReplica:
    """The program and environment of ``rid``; a missing program or secret is a :class:`JobSpecError`.

    ``scratch`` is the job's own temporary folder (``TMPDIR``, unless the spec sets it), as a pod has its own
    ``/tmp``: what the program and its tools leave there (torchrun's, TensorFlow's, a function's runner) goes with
    the job."""
    kind = kind_of(job)
    container = main_container(job, rid.type)
    path = f"{kind.replicas_path()}.{rid.type}.template.spec.containers"
    if container is None:
        raise JobSpecError(path, "missing: every replica needs a container")
    pod_name = f"{job.name}-{rid.label}"
    env = image_env(kind.pod_hostname(job, rid)) if config.clean_env else inherited_env()
    if scratch is not None:
        env["TMPDIR"] = str(scratch)
    env.update(config.extra_env)
    declared = _declared_env(job, container, pod_name, path)
    env.update(declared)
    operator = dict(kind.operator_env(job, rid, topology))
    env.update(operator)
    adapt_env(kind, job, rid, env)
    # The kubelet expands command and args with the container's whole env as the pod spec declares it: its own env
    # and what the operator put in it (kubernetes/kubernetes@v1.36.3:pkg/kubelet/container/helpers.go,
    # ExpandContainerCommandAndArgs, given makeEnvironmentVariables' result). The base environment stands for the
    # image's ENV, which the kubelet never sees.
    declared.update({name: env[name] for name in operator if name in env})
    override = config.commands.get(rid.type) or config.commands.get(ALL_REPLICA_TYPES)
    if override:
        argv = list(override)
    elif container.command:
        argv = [*container.command, *(container.args or [])]
    elif (entrypoint := kind.entrypoint(job, rid)) is not None:
        argv = [*entrypoint, *(container.args or [])]
    else:
        raise JobSpecError(
            f"{path}[{container.name}].command",
            f"missing: locally the image's entrypoint is not available; give --command "
            f"(or --command {rid.type}=...) with the program to run",
        )
    command_path = f"{path}[{container.name}].command"
    try:
        argv = [expand_k8s_vars(a, declared, limit=MAX_ARG_STRLEN) for a in argv]
    except ExpansionTooLarge as exc:
        raise JobSpecError(command_path, f"an argument {exc}") from None
    # A file the operator mounts (/etc/mpi/discover_hosts.sh) named on the command line is found under the workdir.
    mounted = {path: str(topology.file(path)) for path in kind.operator_files(job, topology)}
    argv = [mounted.get(a, a) for a in argv]
    if argv[0] in _PYTHON_NAMES:
        argv[0] = sys.executable  # the image's python is this environment's python
    _check_program(argv[0], env, command_path)
    check_exec_size(argv, env, f"{path}[{container.name}]")
    grace = job.replica_specs[rid.type].template.spec.extra.get("terminationGracePeriodSeconds")
    return LocalReplica(
        id=rid,
        argv=argv,
        env=env,
        grace_s=float(config.grace_period_s if grace is None else grace),
        policy=kind.restart_policy(job, rid.type),
        tail=collections.deque(maxlen=config.log_tail_lines),
        log_path=logs_dir / f"{rid.label}.log",
    )


def _declared_env(job: TrainingJob, container: Container, pod_name: str, path: str) -> dict[str, str]:
    """The variables ``container``'s env declares (``path``: the replica's containers), each as the kubelet gives
    it (kubernetes/kubernetes@v1.36.3:pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables): in the env's order, a
    ``value`` expanded with the variables declared before it (:func:`expand_k8s_vars`; a later one, or one of the
    base environment, is left as written), a ``valueFrom`` resolved and never expanded, an optional one this machine
    cannot answer left unset.

    The kubelet also maps names to the service variables of the pod's namespace (getServiceEnvVarMap: the
    ``kubernetes`` service always, the namespace's services when ``enableServiceLinks``); a replica here belongs to
    no namespace and reaches no service, so it has none, and a reference to one stays as written."""
    declared: dict[str, str] = {}
    for j, var in enumerate(container.env or []):
        if var.value_from is not None:
            value = _resolve_value_from(var.name, var.value_from, pod_name, job, f"{path}.env")
            if value is None:
                continue
        else:
            try:
                value = expand_k8s_vars(var.value or "", declared, limit=MAX_ARG_STRLEN)
            except ExpansionTooLarge as exc:
                raise JobSpecError(f"{path}[{container.name}].env[{j}].value", f"{var.name}: {exc}") from None
        declared[var.name] = value
    return declared


def inherited_env() -> dict[str, str]:
    """This process's environment without the operators' contract variables, with this Python's tools first."""
    env = {k: v for k, v in os.environ.items() if not _CONTRACT_VARS.match(k)}
    # Tools installed beside this Python (torchrun, mpirun from a venv) are the image's tools.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    return env


def image_env(hostname: str) -> dict[str, str]:
    """What a container starts with before its spec's env: a standard PATH (this Python's tools first), HOME,
    a UTF-8 locale, the temporary folder, the time zone, and HOSTNAME set to the pod's host name
    (:meth:`~kftrain.job.kinds.Kind.pod_hostname`), as Kubernetes sets it. Nothing else of this process's
    environment: a replica that works so also works in a pod."""
    env = {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), _IMAGE_PATH]),
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOSTNAME": hostname,
    }
    env.update({k: os.environ[k] for k in _IMAGE_KEEPS if k in os.environ})
    return env


def _check_program(program: str, env: Mapping[str, str], where: str) -> None:
    """The program exists and can be run, before any replica starts."""
    if shutil.which(program, path=env.get("PATH")) is not None:
        return
    if os.sep in program and os.path.isdir(program):
        raise JobSpecError(where, f"program {program!r} is a folder, not a program")
    if os.sep in program and os.path.exists(program):
        raise JobSpecError(
            where, f"program {program!r} is not executable (chmod +x it, or run it with its interpreter)"
        )
    raise JobSpecError(where, f"program {program!r} not found on PATH")


def check_exec_size(argv: list[str], env: Mapping[str, str], where: str) -> None:
    """Refuse what the kernel would refuse with E2BIG: one string over MAX_ARG_STRLEN, or the lot over ARG_MAX.

    A pod's container runtime hits the same limits when it starts the program; here the error names the
    variable (or the argument) before anything starts.
    """
    for name, value in env.items():
        size = len(f"{name}={value}".encode(errors="surrogateescape")) + 1
        if size > MAX_ARG_STRLEN:
            raise JobSpecError(
                f"{where}.env[{name}]",
                f"{size} bytes: more than the {MAX_ARG_STRLEN} bytes the kernel accepts for one variable",
            )
    for k, arg in enumerate(argv):
        size = len(arg.encode(errors="surrogateescape")) + 1
        if size > MAX_ARG_STRLEN:
            raise JobSpecError(
                f"{where}.command[{k}]", f"{size} bytes: more than the {MAX_ARG_STRLEN} bytes of one argument"
            )
    pointer = 8
    total = sum(len(a.encode(errors="surrogateescape")) + 1 + pointer for a in argv)
    total += sum(len(f"{k}={v}".encode(errors="surrogateescape")) + 1 + pointer for k, v in env.items())
    limit = _arg_max() - _EXEC_HEADROOM
    if total > limit:
        raise JobSpecError(
            f"{where}.env",
            f"the program's arguments and environment ({len(env)} variables) take {total} bytes, more than the "
            f"{limit} bytes the kernel accepts (ARG_MAX); the program could not be started, here or in a pod",
        )


def _arg_max() -> int:
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return 2 * 1024 * 1024


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

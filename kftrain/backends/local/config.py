"""How the local backend runs a job: where its files go, what each replica runs, how it is stopped and restarted."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kftrain.backends.base import BackendConfig
from kftrain.errors import JobSpecError

# The key of ``LocalConfig.commands`` that applies to every replica type.
ALL_REPLICA_TYPES = "*"


@dataclass
class LocalConfig(BackendConfig):
    # Where the hostfile and the replicas' logs go (kept as it is); None: a temporary folder of the job's, removed when
    # the job ends, however it ends, once what its replicas wrote is kept in the state folder (.workdirs).
    workdir: Path | None = None
    # The program of each replica type (ALL_REPLICA_TYPES: of every type), replacing the container's command + args.
    commands: dict[str, list[str]] = field(default_factory=dict)
    # Extra variables of every replica (below the job's own env and the operator's contract).
    extra_env: dict[str, str] = field(default_factory=dict)
    # True: a replica starts from an image-like environment (PATH, HOME, LANG, TMPDIR, HOSTNAME...) instead of
    # this process's, so a job that forgot to declare a variable (a credential) fails here as on a cluster.
    clean_env: bool = False
    # Run a suspended job (its kind's suspend field true) as if its queue admitted it; False: refuse it, since the
    # operator starts no replica of a suspended job.
    admit_suspended: bool = False
    # Give the replicas of a job whose pods share a folder (a TrainJob's /workspace) that folder privately, as the job's
    # own (a mount namespace per replica: kftrain.backends.local.workspace); False, or where the kernel refuses it:
    # they get its path as KFTRAIN_WORKSPACE instead.
    private_workspace: bool = True
    # The folder the replicas' working folder shows (each job's replicas run in a folder of their own job, with a link
    # to each of its entries: kftrain.backends.local.workdirs); None: this process's current folder.
    cwd: Path | None = None
    # What ended jobs left in the state folder (their logs' ends, the files their replicas wrote) kept: the newest
    # keep_finished, none older than keep_finished_s; each submit removes the others.
    keep_finished: int = 20
    keep_finished_s: float = 7 * 24 * 3600.0
    # kftrain jobs list: every user's jobs in a shared state folder ($KFTRAIN_STATE_DIR), not only this user's.
    every_user: bool = False
    # SIGTERM, then SIGKILL after this long, as the kubelet does (a pod's terminationGracePeriodSeconds wins).
    grace_period_s: float = 5.0
    # The most replicas a job may have here: each one is a process (and its supervisor) on this machine.
    max_replicas: int = 64
    REPLICA_LIMIT_WHY = (
        "locally every replica is a process on this machine, and more than {limit} is a job for a cluster; raise "
        "LocalConfig.max_replicas (kftrain launch --max-local-replicas) if this machine can take it"
    )
    poll_interval_s: float = 0.05
    restart_backoff_s: float = 0.5
    max_restart_backoff_s: float = 10.0


def parse_command_overrides(values: Sequence[str]) -> dict[str, list[str]]:
    """``--command "python t.py"`` for every replica, ``--command Worker="python w.py"`` for one type."""
    out: dict[str, list[str]] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if sep and re.fullmatch(r"[A-Z][A-Za-z]*", key):
            out[key] = _split_command(rest, value)
        else:
            out[ALL_REPLICA_TYPES] = _split_command(value, value)
    return out


def _split_command(command: str, given: str) -> list[str]:
    """``command`` split as a shell would (without running one); a clear error for what cannot be run."""
    try:
        words = shlex.split(command)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise JobSpecError("--command", f"{given!r}: {str(exc).lower()}") from None
    if not words:
        raise JobSpecError("--command", f"{given!r}: no program to run")
    if any("\0" in word for word in words):
        raise JobSpecError("--command", f"{given!r}: contains a NUL character")
    return words

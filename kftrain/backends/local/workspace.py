"""A job's own ``/workspace`` on this machine: whether its replicas can be given it privately, and how.

Kubeflow Trainer's initializers write to ``/workspace/dataset`` and ``/workspace/model`` and its trainer reads there
(kubeflow/trainer@v2.3.0 ``pkg/constants/constants.go:52-62``), so each replica of such a job starts under
:mod:`.mountns`, where ``/workspace`` is the job's ``<workdir>/workspace``. Where the kernel refuses a namespace,
:func:`probe` says why and :func:`give_workspace` says in one line where the folder is instead
(``KFTRAIN_WORKSPACE``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from kftrain.backends.local.replica import LocalReplica
from kftrain.contract import WORKSPACE_ENV
from kftrain.job.kinds import kind_of
from kftrain.job.model import TrainingJob

MOUNTNS = Path(__file__).with_name("mountns.py")


def wrap(workspace: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``workspace`` at ``/workspace``."""
    return [sys.executable, str(MOUNTNS), str(workspace), "--", *argv]


@cache
def probe() -> str | None:
    """None when a replica can be given a private ``/workspace`` here, else why not (checked once per process, in a
    child, within a temporary folder it removes)."""
    folder = Path(tempfile.mkdtemp(prefix="kftrain-workspace-probe-"))
    (folder / "workspace").mkdir()
    env = {**os.environ, "KFTRAIN_PROBE_DIR": str(folder)}
    try:
        proc = subprocess.run(
            [sys.executable, str(MOUNTNS), "--probe"], capture_output=True, text=True, timeout=30, env=env
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def give_workspace(
    job: TrainingJob, workdir: Path, replicas: Sequence[LocalReplica], *, private: bool, say: Callable[[str], None]
) -> None:
    """The folder the job's pods share (a TrainJob's /workspace) as the job's own ``<workdir>/workspace``: at its
    path, in a private mount namespace per replica, where this machine allows one (and ``private``); else by
    KFTRAIN_WORKSPACE, which ``say`` tells."""
    mount = kind_of(job).workspace(job)
    if mount is None:
        return
    folder = workdir / "workspace"
    folder.mkdir(exist_ok=True)
    why = probe() if private else "LocalConfig.private_workspace is False"
    for replica in replicas:
        if why is None:
            replica.argv = wrap(folder, replica.argv)
        else:
            replica.env[WORKSPACE_ENV] = str(folder)
    if why is not None:
        say(
            f"no private {mount} for the replicas here ({why}): the job's {mount} is {folder}; a program that "
            f"reads {mount}/dataset as Trainer documents must read ${WORKSPACE_ENV}/dataset here"
        )

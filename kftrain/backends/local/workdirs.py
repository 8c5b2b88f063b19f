"""The folders of a local job: where its replicas run, and how long the work folders of ended jobs are kept.

**Where replicas run.** In a pod a program starts in its image's working folder, and what it writes there is gone
with the pod: a second job never finds the first one's files. Locally each job's replicas run in a folder of their
own job, ``<workdir>/cwd-*``, that shows the launch folder (the caller's current folder, or ``LocalConfig.cwd``):
one symbolic link per entry of it, made when the job starts. So ``python train.py``, ``-m pkg.train``,
``--data data/train.csv`` and the imports of the project's modules work as from the launch folder; a file the
program creates at the top of its working folder (``snapshot.pt``, ``outputs/``) stays in the job's folder; and
the next job starts from the launch folder alone, never resuming another job's files. Writes *into* a folder the
launch folder already had (``data/``) go to that folder, as its link says, and ``..`` is the job's work folder.

**How long they are kept.** A job's work folder holds the live logs, the operator's mounted files and the
replicas' working folder. The backend removes the one it made when the job succeeds; the folder of a job that
failed is kept for a look at what it left, at most ``LocalConfig.keep_finished`` of them and none older than
``LocalConfig.keep_finished_s`` (each submit removes the others). The ends of every ended job's logs are also kept
in the state folder (:mod:`.state`), for ``kftrain jobs logs``, for as many jobs.

**Whose they are.** A job holds its work folder while it runs (a lock on ``<workdir>/.kftrain-job``, released by the
kernel when its launcher dies): a second job given the same ``--workdir`` is refused instead of mixing its logs and
files with the first's. A record in the state folder is untrusted, so pruning removes only a folder kftrain made: of
its own name (``kftrain-<job>-*``), not a link, holding the random token the job's record holds, and not held by a
running job; never a folder a record merely names.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kftrain.backends.local import state as job_state
from kftrain.errors import KftrainError
from kftrain.job.validate import is_job_name

MARKER = ".kftrain-job"  # in a work folder: the job that holds it (locked while it runs) and its token


@dataclass
class WorkdirClaim:
    """A running job's hold on its work folder: the marker's locked descriptor, and the token it holds."""

    fd: int
    token: str

    def release(self) -> None:
        job_state.release(self.fd)


def claim_workdir(workdir: Path, job: str) -> WorkdirClaim:
    """Hold ``workdir`` for the job ``job`` until released; a folder a running job holds is refused, naming it."""
    fd = os.open(workdir / MARKER, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KftrainError(f"work folder {workdir}: its {MARKER} is not a file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _marker(fd).get("job")
            holder = holder if isinstance(holder, str) and is_job_name(holder) else "of another launcher"
            raise KftrainError(
                f"work folder {workdir} (--workdir) is in use by the running job {holder}: give this job another "
                "one, or none (a folder of its own)"
            ) from None
        token = secrets.token_hex(16)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"job": job, "token": token}).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return WorkdirClaim(fd, token)


def _marker(fd: int) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(os.pread(fd, 4096, 0))
        if isinstance(found, dict):
            return found
    return {}


def remove_owned(record: dict[str, Any]) -> None:
    """Remove the work folder of an ended job's ``record`` if kftrain made it for that job (see the module's
    docstring); any other folder a record names stays."""
    workdir, token, name = record.get("workdir"), record.get("workdir_token"), record.get("name")
    if record.get("workdir_owned") is not True or not isinstance(workdir, str) or not isinstance(token, str):
        return
    path = Path(workdir)
    if not token or not path.is_absolute() or not path.name.startswith(f"kftrain-{name}-"):
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        folder = os.open(path, flags | os.O_DIRECTORY)  # not a link
        try:
            fd = os.open(MARKER, flags, dir_fd=folder)
        finally:
            os.close(folder)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not hmac.compare_digest(str(_marker(fd).get("token")), token):
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a running job holds it
        shutil.rmtree(path, ignore_errors=True)  # rmtree refuses a link swapped in since
    finally:
        os.close(fd)


def replica_cwd(workdir: Path, launch: Path) -> Path:
    """A new working folder for a job's replicas inside ``workdir``: a link to each entry of ``launch``."""
    cwd = Path(tempfile.mkdtemp(prefix="cwd-", dir=workdir))
    launch, workdir = launch.resolve(), workdir.resolve()
    with os.scandir(launch) as entries:
        for entry in entries:
            target = launch / entry.name
            if workdir.is_relative_to(target):
                continue  # a job's own work folder (or a folder holding it) is not shown inside itself
            with contextlib.suppress(FileExistsError):
                (cwd / entry.name).symlink_to(target)
    return cwd


def prune_finished(keep: int, max_age_s: float, now: float | None = None) -> None:
    """Remove the work folders the backend made for ended jobs, and the logs kept of them, past the newest ``keep``
    or older than ``max_age_s``; a running job's are never touched."""
    now = time.time() if now is None else now
    # A Running record whose launcher is gone reads as Lost: ended too.
    ended = [r for r in job_state.records() if r.get("phase") not in (job_state.RUNNING, job_state.UNREADABLE)]
    for rank, record in enumerate(ended):  # newest first
        if rank < keep and now - float(record.get("created", 0)) <= max_age_s:
            continue
        remove_owned(record)
        job_state.drop_kept_logs(record["name"])
        if record.get("workdir_owned") and record.get("workdir_kept"):
            job_state.write(record["name"], workdir_kept=False)

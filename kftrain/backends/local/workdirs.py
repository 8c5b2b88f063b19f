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
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from kftrain.backends.local import state as job_state


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
        workdir = record.get("workdir")
        if record.get("workdir_owned") and isinstance(workdir, str) and workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        job_state.drop_kept_logs(record["name"])
        if record.get("workdir_owned") and record.get("workdir_kept"):
            job_state.write(record["name"], workdir_kept=False)

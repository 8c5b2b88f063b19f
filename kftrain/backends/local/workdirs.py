"""The folders of a local job: where its replicas run, what is kept of them when it ends, and whose they are.

Each job's replicas run in a folder of their own job, ``<workdir>/cwd-*``, showing the launch folder by one link per
entry (:func:`replica_cwd`): the program's files resolve as from there, what it writes at the top stays the job's.
When the job ends, however it ends, its work and scratch folders go (as a pod's do) once the ends of its logs and
every file its replicas wrote (:func:`keep_files`, but the initializers' downloads) are kept in the state folder,
within ``LocalConfig.keep_finished``/``keep_finished_s`` (:func:`prune_finished`). A running job holds its folders
(a lock on ``<workdir>/.kftrain-job``); removing a dead job's folders (:func:`remove_owned`) removes only one kftrain
made for it, holding the token its record holds; a ``--workdir`` the user gave stays.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kftrain.backends import safe_paths
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


SCRATCH_PREFIX = "kftrain-tmp-"


def workdir_prefix(job: str) -> str:
    """The name every work folder the backend makes for the job ``job`` starts with."""
    return f"kftrain-{job}-"


def remove_owned(record: dict[str, Any]) -> None:
    """Remove the work folder and the scratch folder of an ended job's ``record`` where kftrain made them for that job
    (see the module's docstring); any other folder a record names stays."""
    name = str(record.get("name"))
    if record.get("workdir_owned") is True:
        _remove_claimed(record.get("workdir"), record.get("workdir_token"), workdir_prefix(name))
    _remove_claimed(record.get("scratch"), record.get("scratch_token"), SCRATCH_PREFIX)


def _remove_claimed(folder: object, token: object, prefix: str) -> None:
    if not isinstance(folder, str) or not isinstance(token, str) or not token:
        return
    path = Path(folder)
    if not path.is_absolute() or not path.name.startswith(prefix):
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        opened = os.open(path, flags | os.O_DIRECTORY)  # not a link
        try:
            fd = os.open(MARKER, flags, dir_fd=opened)
        finally:
            os.close(opened)
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


@dataclass
class KeptFiles:
    """What :func:`keep_files` kept of a job's folders, and what it could not keep."""

    folder: Path  # where they are now
    kept: list[tuple[str, int]] = field(default_factory=list)  # (path under ``folder``, bytes)
    left: list[tuple[str, str]] = field(default_factory=list)  # (path, why it was not kept)

    def describe(self, job: str) -> list[str]:
        """One line for what was kept (naming the first few), one for what was not; none when the job wrote nothing."""
        lines = []
        if self.kept:
            shown = ", ".join(path for path, _ in self.kept[:_NAMED])
            more = f" and {len(self.kept) - _NAMED} more" if len(self.kept) > _NAMED else ""
            size = sum(size for _, size in self.kept)
            lines.append(
                f"{job}: its replicas wrote {shown}{more} ({_size(size)}) in their job's folders, outside "
                f"$KFTRAIN_MODEL_URI (on a cluster they would be gone with the pods): kept in {self.folder} "
                f"(kftrain jobs download {job} DEST)"
            )
        if self.left:
            lines.append(f"{job}: not kept: " + "; ".join(f"{path} ({why})" for path, why in self.left))
        return lines


_NAMED = 5  # paths a line names before "and N more"


def keep_files(workdir: Path, cwd: Path, shown: Path, dest: Path, downloads: Sequence[str] = ()) -> KeptFiles:
    """Move what a job's replicas wrote into ``dest``: the entries of their working folder ``cwd`` (``cwd/...``) but
    the links to the launch folder ``shown`` made when the job started, and those of the job's ``workdir/workspace``
    (``workspace/...``) but the initializers' ``downloads`` (named as not kept). ``dest`` is made afresh by
    :func:`~kftrain.backends.safe_paths.fresh_folder` (an ``UnsafePath`` when another user's is there), so nothing
    is moved through a link placed in it. A path that cannot be moved (the disk is full) is named as not kept."""
    result = KeptFiles(dest)
    shown = shown.resolve()
    wanted: list[tuple[Path, str]] = []
    with contextlib.suppress(OSError):
        for entry in sorted(cwd.iterdir()):
            if entry.is_symlink() and os.readlink(entry) == str(shown / entry.name):
                continue  # the launch folder's, shown by the link made when the job started
            wanted.append((entry, f"cwd/{entry.name}"))
    workspace = workdir / "workspace"
    with contextlib.suppress(OSError):
        for entry in sorted(workspace.iterdir()):
            where = f"workspace/{entry.name}"
            if entry.name in downloads:
                result.left.append((where, "an initializer's download"))
            else:
                wanted.append((entry, where))
    if wanted:
        safe_paths.fresh_folder(dest.parent, dest.name)
    for entry, where in wanted:
        size = _bytes(entry)
        target = dest / where
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(entry, target)  # a rename within one file system, else a copy (links kept as links)
        except OSError as exc:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    target.unlink()
            why = exc.strerror or str(exc)  # shutil.Error lists every file: its start says enough
            result.left.append((where, f"could not be kept: {why[:200]}"))
            continue
        result.kept.append((where + ("/" if target.is_dir() and not target.is_symlink() else ""), size))
    return result


def _bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (links not followed)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
        return sum((Path(top) / name).lstat().st_size for top, _, names in os.walk(path) for name in names)
    except OSError:
        return 0


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value, unit = count / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


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
    """Forget what ended jobs left in the state folder (their logs' ends and files) past the newest ``keep`` or older
    than ``max_age_s``, and the folders kftrain made for them; a running job's are never touched."""
    now = time.time() if now is None else now
    # A Running record whose launcher is gone reads as Lost: ended too.
    ended = [r for r in job_state.records() if r.get("phase") not in (job_state.RUNNING, job_state.UNREADABLE)]
    for rank, record in enumerate(ended):  # newest first
        if rank < keep and now - float(record.get("created", 0)) <= max_age_s:
            continue
        remove_owned(record)
        job_state.drop_kept(record["name"])

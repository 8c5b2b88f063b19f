"""Local staging files and folders (``<final>.partial-<id>``): made so a dead writer's can be told from a live one's.

A writer holds an exclusive ``flock`` on its staging file or folder for as long as it writes. The kernel
drops the lock when the writer dies, however it dies, so :func:`clean_stale` removes exactly the staging
left by dead writers: whatever it can lock. A staging folder that a cleaner removed between its creation
and its locking is noticed (it is no longer the folder at that path) and made again under a new name.
Where the filesystem cannot lock, nothing is ever cleaned: a live writer's staging is never at risk.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid

INFIX = ".partial-"


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _still_at(fd: int, path: str) -> bool:
    """Whether ``path`` is still the file ``fd`` was opened on (not removed, not replaced)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except OSError:
        return False


def make_staging_dir(final: str) -> tuple[str, int]:
    """A new staging folder beside ``final``, locked; its path, and the descriptor holding the lock."""
    os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
    for _ in range(100):
        path = f"{final}{INFIX}{_new_id()}"
        os.mkdir(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if _lock(fd) and _still_at(fd, path):
            return path, fd
        os.close(fd)  # a cleaner got there first; it has removed, or is removing, that one
    raise OSError(f"{final}: could not make a staging folder beside it")


def open_staging_file(final: str) -> tuple[str, int]:
    """A new staging file beside ``final``, open for writing and locked; its path and descriptor."""
    for _ in range(100):
        path = f"{final}{INFIX}{_new_id()}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if _lock(fd) and _still_at(fd, path):
            return path, fd
        os.close(fd)  # a cleaner locked it between its creation and ours, and removes it
    raise OSError(f"{final}: could not make a staging file beside it")


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def clean_stale(final: str) -> list[str]:
    """Remove the staging files and folders beside ``final`` whose writers are gone; the paths removed."""
    parent = os.path.dirname(final) or "."
    prefix = os.path.basename(final) + INFIX
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue  # gone already, or a symbolic link: not ours to follow
        try:
            if not _lock(fd) or not _still_at(fd, path):
                continue  # its writer is alive
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed

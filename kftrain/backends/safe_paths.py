"""Every path kftrain writes, moves or locks in a folder others may share (the local state folder, a download's
destination): made by kftrain itself, or checked to be this user's, before anything goes into it.

A folder is used only when it is a folder (a link there is not followed), owned by this user (a shared one: or by
root) and writable by no one else unless sticky, as ``/tmp`` is (no one renames or removes another's entry). A file is
written under a fresh name (``O_EXCL``, never through a link) and renamed into place; a job's folder is made afresh,
0700. Anything else is refused with :class:`UnsafePath`: one line naming the path and why.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

from kftrain.errors import KftrainError

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(KftrainError):
    """A path kftrain will not write through: another user could have placed or could replace it."""

    def __init__(self, path: Path | str, why: str, way_out: str = "remove it, or use a folder of your own") -> None:
        super().__init__(f"{path}: {why}; refused as unsafe ({way_out})")
        self.path, self.why = Path(path), why


def _problem(info: os.stat_result, *, folder: bool, shared: bool, any_mode: bool = False) -> str | None:
    """What makes an entry with ``info`` unsafe to use (None: nothing); ``any_mode``: to remove, whoever may write."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if folder and not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if not folder and not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    me = os.geteuid()
    if info.st_uid != me and not (shared and info.st_uid == 0):
        return f"owned by uid {info.st_uid}, not by this user (uid {me})"
    if info.st_mode & 0o022 and not any_mode and not (folder and shared and info.st_mode & stat.S_ISVTX):
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):04o}) and not sticky"
    if not folder and info.st_nlink > 1:
        return "a file with another name (a hard link)"
    return None


def check_folder(path: Path, *, shared: bool = False) -> None:
    """Refuse the folder ``path`` (followed: the user named it) unless it is this user's (``shared``: or root's) and
    writable by no one else unless sticky."""
    why = _problem(path.stat(), folder=True, shared=shared)
    if why is not None:
        raise UnsafePath(path, why)


def entry(folder: Path, name: str, *, is_folder: bool, any_mode: bool = False) -> bool:
    """Whether ``folder/name`` exists; when it does, refuse it unless it is this user's own, as :func:`_problem`
    says (a link there is never followed; ``any_mode``: to be removed, so others' write access does not matter)."""
    try:
        info = os.lstat(folder / name)
    except FileNotFoundError:
        return False
    why = _problem(info, folder=is_folder, shared=False, any_mode=any_mode)
    if why is not None:
        raise UnsafePath(folder / name, why)
    return True


def own_folder(folder: Path, name: str, mode: int = 0o700) -> Path:
    """``folder/name``, a folder of this user's: the one there, checked, else made now."""
    if not entry(folder, name, is_folder=True):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
            os.mkdir(folder / name, mode)
        entry(folder, name, is_folder=True)
    return folder / name


def fresh_folder(folder: Path, name: str) -> Path:
    """``folder/name`` made now, 0700 (what this user had there removed first). In a checked ``folder`` no one else
    can swap it, and no one else can write into it: paths under it are safe to write and move into."""
    if entry(folder, name, is_folder=True, any_mode=True):
        shutil.rmtree(folder / name)
    try:
        os.mkdir(folder / name, 0o700)
    except FileExistsError:
        raise UnsafePath(folder / name, "made by someone else meanwhile") from None
    entry(folder, name, is_folder=True)
    return folder / name


def remove_own(path: Path) -> None:
    """Remove the folder ``path`` when it is this user's own; anything else there stays."""
    with contextlib.suppress(OSError, UnsafePath):
        if entry(path.parent, path.name, is_folder=True, any_mode=True):
            shutil.rmtree(path, ignore_errors=True)


def write_file(folder: Path, name: str, data: bytes | Path, mode: int = 0o600) -> None:
    """Write ``data`` (or the file ``data`` names, read never through a link) to ``folder/name``: to a fresh file
    (never through a link, never one made by someone else), then renamed over whatever was there (a link there is
    replaced, not followed). ``mode`` is masked by the umask."""
    top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the caller checked it
    try:
        tmp = f".{name}.{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode, dir_fd=top)
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(data, Path):
                    with os.fdopen(os.open(data, os.O_RDONLY | _NOFOLLOW), "rb") as source:
                        shutil.copyfileobj(source, handle)
                else:
                    handle.write(data)
            os.replace(tmp, name, src_dir_fd=top, dst_dir_fd=top)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=top)
            raise
    finally:
        os.close(top)


def open_lock(folder: Path, name: str) -> int:
    """``folder/name`` open to lock (made if missing): a regular file of this user's, never through a link; an
    :class:`UnsafePath` when something else is there, an ``OSError`` when the folder cannot hold one."""
    try:
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    except OSError:
        entry(folder, name, is_folder=False)  # something is there that is not ours: say what
        raise
    why = _problem(os.fstat(fd), folder=False, shared=False)
    if why is not None:
        os.close(fd)
        raise UnsafePath(folder / name, why)
    return fd


def copy_tree(source: Path, folder: Path, name: str) -> Path:
    """Copy the folder ``source`` (links kept as links) to ``folder/name``: each folder this user's own (made, or
    checked), each file and link written under a fresh name and renamed into place, so nothing is written through a
    link placed there."""
    target = own_folder(folder, name, 0o755)
    for item in sorted(source.iterdir()):
        info = item.lstat()
        if stat.S_ISDIR(info.st_mode):
            copy_tree(item, target, item.name)
        elif stat.S_ISREG(info.st_mode):
            write_file(target, item.name, item, 0o666)
        elif stat.S_ISLNK(info.st_mode):
            if not (target / item.name).is_symlink():
                # A folder or another user's file there stays, refused; a file of this user's is replaced.
                entry(target, item.name, is_folder=False, any_mode=True)
            tmp = target / f".{item.name}.{secrets.token_hex(8)}"
            tmp.symlink_to(os.readlink(item))
            os.replace(tmp, target / item.name)
    return target

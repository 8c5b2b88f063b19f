"""A replica's private mount namespace, where the job's own folder is seen at ``/workspace`` and everything else as it
is: ``python mountns.py WORKSPACE -- PROGRAM [ARGS...]`` (standard library only; :mod:`.workspace` decides when).

:func:`main` enters a new mount namespace (not root: inside a user namespace mapping this user to itself), every
mount private; builds a root of its own (a tmpfs holding every entry of ``/`` bound recursively, plus ``workspace``
bound to ``<workdir>/workspace``); changes root to it and execs the program, whose ranks inherit it. Nothing is
written outside the job's folder, and the namespace ends with the replica's last process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

MOUNT_POINT = "/workspace"
_ROOT = ".kftrain-root"
# <linux/sched.h>, <sys/mount.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _enter_namespace(libc: ctypes.CDLL) -> None:
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and libc.unshare(CLONE_NEWNS) == 0:
        return
    # Not root (or root without the capability): a user namespace gives the capability to mount in it. This user is
    # mapped to itself, so the program runs as who it is; the capability ends at its exec.
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(libc.mount(encode(source), encode(target), encode(fstype), flags, None), f"mount {target}")


def private_root(workspace: Path) -> Path:
    """Enter a private mount namespace whose new root (returned, not yet entered) shows ``/`` with ``workspace`` at
    ``/workspace``."""
    libc = _libc()
    _enter_namespace(libc)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    root = workspace.parent / _ROOT
    root.mkdir(exist_ok=True)
    _mount(libc, "tmpfs", str(root), "tmpfs", 0)
    for entry in sorted(os.listdir("/")):
        source, target = f"/{entry}", root / entry
        if entry == MOUNT_POINT.lstrip("/"):
            continue
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            target.mkdir()
            _mount(libc, source, str(target), None, MS_BIND | MS_REC)
        else:
            target.touch()
            _mount(libc, source, str(target), None, MS_BIND)
    (root / MOUNT_POINT.lstrip("/")).mkdir()
    _mount(libc, str(workspace), str(root / MOUNT_POINT.lstrip("/")), None, MS_BIND | MS_REC)
    return root


def main(argv: list[str] | None = None) -> int:
    """``python mountns.py WORKSPACE -- PROGRAM [ARGS...]`` (``--probe``: only check)."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--probe"]:
        private_root(Path(os.environ["KFTRAIN_PROBE_DIR"]) / "workspace")
        return 0
    if len(args) < 3 or args[1] != "--":
        print("usage: python mountns.py WORKSPACE -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    workspace, program = Path(args[0]).resolve(), args[2:]
    cwd = os.getcwd()
    try:
        root = private_root(workspace)
        os.chroot(root)
        os.chdir(cwd)
    except OSError as exc:
        print(f"[kftrain] cannot give this replica a private {MOUNT_POINT}: {exc}", file=sys.stderr, flush=True)
        return 126
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        print(f"[kftrain] cannot run {program[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())

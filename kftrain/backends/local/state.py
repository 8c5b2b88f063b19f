"""The local backend's record of its jobs, so ``kftrain jobs`` can list and operate them from another shell.

One JSON file per job in the state folder (``$KFTRAIN_STATE_DIR``, else the XDG state folder, made 0700), written
when the job starts and ends; once it ends, the end of each replica's log (``<name>.logs/``) and the files its
replicas wrote (``<name>.files/``: :mod:`.workdirs`) are kept beside it. A running job holds a lock on its name
(``.<name>.lock``). Every path written there goes through :mod:`kftrain.backends.safe_paths`: a default folder of
another user's, a shared one not sticky, or a job's path another user placed is refused in one line. Records are read
as untrusted: a name is never a path, only small regular files are read, a malformed one is listed ``Unreadable``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import time
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from kftrain.backends import safe_paths
from kftrain.errors import KftrainError
from kftrain.job.validate import is_job_name

STATE_DIR_ENV = "KFTRAIN_STATE_DIR"
RUNNING, LOST, UNREADABLE = "Running", "Lost", "Unreadable"
# A record is a few hundred bytes; anything much larger is not one.
MAX_RECORD_BYTES = 1 << 20
# How deeply a record may nest (kftrain writes 3 levels at most); a deeper one is refused, not walked.
MAX_RECORD_DEPTH = 16
# The end of each replica's log kept beside the record once the job has ended.
KEPT_LOG_BYTES = 1 << 20
# The fields of a record and their types, as a record is read back.
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "created": (int, float),
    "kind": str,
    "phase": str,
    "labels": dict,
    "replicas": list,
    "launcher_pid": int,
    "launcher_started": (int, float),
    "workdir": str,
    "workdir_token": str,
    "scratch": str,
    "scratch_token": str,
    "model_uri": str,
    "logs_uri": str,
}


def state_dir() -> Path:
    """The state folder: ``$KFTRAIN_STATE_DIR``, else this user's (see the module's docstring)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    return _default_state_dir()


def _default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME", "")  # a relative one is ignored, as the XDG Base Directory spec says
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "kftrain" / "jobs"


def own_state_dir(create: bool = True) -> Path:
    """The state folder (``create``: made if missing, its last folder 0700), checked to be this user's when it is the
    default one: a :class:`KftrainError` naming the owner and the way out otherwise."""
    folder = state_dir()
    if create:
        with contextlib.suppress(OSError):
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
    shared = bool(os.environ.get(STATE_DIR_ENV))  # a folder the user named may be shared: sticky, as /tmp is
    try:
        safe_paths.check_folder(folder, shared=shared)
    except FileNotFoundError:
        pass  # none to be had: nothing is kept there (a job never fails for its bookkeeping)
    except safe_paths.UnsafePath as exc:
        raise KftrainError(
            f"state folder {folder} is {exc.why}: set {STATE_DIR_ENV} to a folder of your own, or remove that one"
        ) from None
    return folder


def is_mine(path: Path) -> bool:
    """Whether this user wrote the file ``path`` (its owner, as the kernel says: never what the file claims)."""
    try:
        return path.lstat().st_uid == os.geteuid()
    except OSError:
        return False


def checked_name(name: str) -> str:
    """``name`` when it is a job name; anything else (``../victim``, ``a/b``) could name a file outside the folder."""
    if not isinstance(name, str) or not is_job_name(name):
        raise KftrainError(
            f"{name!r} is not a job name (lower-case letters, digits and '-', starting with a letter, at most 63 "
            "characters)"
        )
    return name


# A replica's label (``worker-1``: kftrain.job.topology.ReplicaId.label), the name of its log file: never a path.
_LABEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,252}", re.ASCII)


def is_replica_label(label: object) -> bool:
    return isinstance(label, str) and bool(_LABEL_RE.fullmatch(label))


def record_path(name: str) -> Path:
    """The file of job ``name``'s record."""
    return state_dir() / f"{checked_name(name)}.json"


def logs_dir(name: str) -> Path:
    """Where the ended job ``name``'s replica logs are kept."""
    return state_dir() / f"{checked_name(name)}.logs"


def files_dir(name: str) -> Path:
    """Where the files the ended job ``name``'s replicas wrote in their job's folders are kept."""
    return state_dir() / f"{checked_name(name)}.files"


def write(name: str, fresh: bool = False, **fields: Any) -> None:
    """Create or update the record of job ``name`` with ``fields``; ``fresh``: a new job's, replacing whatever an
    ended job of that name left (its reason, exit code, work folder are not this job's)."""
    target = record_path(name)
    with contextlib.suppress(OSError, ValueError, KftrainError):  # a job never fails for its bookkeeping
        own_state_dir()
        try:
            record = None if fresh else _load(target)
        except ValueError:  # a malformed record of that name: this job's replaces it
            record = None
        record = record or {"name": name, "created": time.time()}
        record.update(fields)
        safe_paths.write_file(target.parent, target.name, json.dumps(record, sort_keys=True).encode(), 0o644)


def claim_name(name: str, resource: str) -> int | None:
    """Hold the name ``name`` for a job this process starts, until :func:`release`: the lock's descriptor, or None
    where the state folder cannot hold one (a job never fails for its bookkeeping). A job of that name still running
    (its launcher holds the lock: the lock, not the record, says so, since the kernel lets go of it when the launcher
    dies) refuses it as the API server refuses a duplicate create: ``<resource> "<name>" already exists``
    (k8s.io/apimachinery pkg/api/errors/errors.go NewAlreadyExists), with the way out. A lock, kept logs or kept
    files of that name that are not this user's own refuse it too (:class:`~kftrain.backends.safe_paths.UnsafePath`)."""
    folder = own_state_dir()
    try:
        fd = safe_paths.open_lock(folder, f".{checked_name(name)}.lock")
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for kept in (logs_dir(name), files_dir(name)):  # this user's, to be made afresh when the job ends
            safe_paths.entry(folder, kept.name, is_folder=True, any_mode=True)
    except BlockingIOError:
        os.close(fd)
        _already_exists(name, resource, (read(name) or {}).get("launcher_pid"))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _already_exists(name: str, resource: str, pid: object) -> None:
    by = f" (launched by pid {pid})" if isinstance(pid, int) else ""
    raise KftrainError(
        f'{resource} "{name}" already exists: a job of that name is running on this machine{by}; stop it with '
        f"`kftrain jobs delete {name}`, or give this job another name"
    )


def release(fd: int | None) -> None:
    """Let go of a lock :func:`claim_name` (or a work folder's claim) holds."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def launcher_identity() -> dict[str, Any]:
    """This process as a record names its launcher: its pid and its start time (a pid alone may be reused)."""
    return {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time()}


def read(name: str) -> dict[str, Any] | None:
    """The record of job ``name`` (phase ``Lost`` when it claims to run but its launcher is gone); None if none. A
    malformed record is returned as phase ``Unreadable`` with the reason."""
    path = record_path(name)
    try:
        record = _load(path)
    except (OSError, ValueError) as exc:
        return _unreadable(path, str(exc))
    if record is None:
        return None
    if record.get("phase") == RUNNING and not launcher_alive(record):
        record["phase"] = LOST
    return record


def records(every_user: bool = False) -> list[dict[str, Any]]:
    """Every job this user recorded (``every_user``: anyone's, in a shared folder), newest first; a malformed record
    is one of phase ``Unreadable``, with the reason."""
    folder = own_state_dir(create=False)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        if path.name.startswith(".") or path.suffix != ".json":
            continue
        if not every_user and not is_mine(path):
            continue
        if not is_job_name(path.stem):
            found.append(_unreadable(path, "the file's name is not a job name"))
            continue
        record = read(path.stem)
        if record is not None:
            found.append(record)
    return sorted(found, key=lambda r: -float(r.get("created", 0)))


def remove(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(name).unlink()
    drop_kept(name)


def keep_logs(name: str, live: Path, labels: list[str]) -> None:
    """Keep the end (at most :data:`KEPT_LOG_BYTES`) of each replica's live log in ``live`` beside the record, in a
    folder made now (:func:`~kftrain.backends.safe_paths.fresh_folder`: an ``UnsafePath`` when another user's is
    there)."""
    with contextlib.suppress(OSError):
        kept = safe_paths.fresh_folder(state_dir(), logs_dir(name).name)
        for label in labels:
            log = open_log(live, label)
            if log is None:
                continue
            with log:
                size = os.fstat(log.fileno()).st_size
                if size > KEPT_LOG_BYTES:
                    log.seek(size - KEPT_LOG_BYTES)
                    log.readline()  # from the first whole line
                safe_paths.write_file(kept, f"{label}.log", log.read(KEPT_LOG_BYTES))


def open_log(logs: Path, label: str) -> BinaryIO | None:
    """Replica ``label``'s log in the folder ``logs``, open to read; None when there is none. Never through a link:
    neither the folder nor the log may be one (a folder swapped for a link to another would show its files), and a
    label that is not one is never a path."""
    if not is_replica_label(label) or not str(logs):
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        top = os.open(logs.parent, flags | os.O_DIRECTORY)
        try:
            folder = os.open(logs.name, flags | os.O_DIRECTORY, dir_fd=top)
        finally:
            os.close(top)
        try:
            fd = os.open(f"{label}.log", flags, dir_fd=folder)
        finally:
            os.close(folder)
    except OSError:
        return None
    log = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device there is no log
        log.close()
        return None
    return log


def kept_log(name: str, label: str) -> str | None:
    """The kept end of replica ``label``'s log of job ``name``; None when none is kept."""
    if not is_replica_label(label):
        return None
    try:
        if not safe_paths.entry(state_dir(), logs_dir(name).name, is_folder=True, any_mode=True):
            return None
        data = _read_regular(logs_dir(name) / f"{label}.log", KEPT_LOG_BYTES)
    except (OSError, ValueError, safe_paths.UnsafePath):  # another user's folder holds no log of this user's
        return None
    return data.decode("utf-8", "replace")


def drop_kept(name: str) -> None:
    """Forget what the ended job ``name`` left beside its record: its logs' ends and its files."""
    safe_paths.remove_own(logs_dir(name))
    safe_paths.remove_own(files_dir(name))


def launcher(record: dict[str, Any]) -> psutil.Process | None:
    """The process the record names as its launcher while it still runs: the same pid *and* the same start time, so
    a pid reused by another process is never taken for the launcher (a record without the start time cannot tell:
    None). What a record says is only listed: a process is signalled only as :func:`name_holder`."""
    pid, started = record.get("launcher_pid"), record.get("launcher_started")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(started, (int, float)):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() != psutil.STATUS_ZOMBIE and abs(proc.create_time() - float(started)) < 0.01:
            return proc
    except psutil.Error:
        pass
    return None


def name_holder(name: str) -> psutil.Process | None:
    """The process that holds job ``name``'s lock (:func:`claim_name`), as the kernel says (``/proc/locks``): the
    job's own launcher, whatever a record claims, since a record's pid and start time can name any process. None
    when no live process of this user's holds it (or the kernel cannot say)."""
    try:
        info = (state_dir() / f".{checked_name(name)}.lock").lstat()
        locks = Path("/proc/locks").read_text()
    except (OSError, KftrainError):
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        return None
    # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0 EOF" (major:minor in hex); a waiter's line has "->" after "1:".
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and fields[5] == where:
            with contextlib.suppress(ValueError, psutil.Error):
                proc = psutil.Process(int(fields[4]))
                if proc.uids().effective == os.geteuid() and proc.status() != psutil.STATUS_ZOMBIE:
                    return proc
    return None


def launcher_alive(record: dict[str, Any]) -> bool:
    return launcher(record) is not None


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes. Opened without blocking and without
    following a link, and checked before it is read: a FIFO, a device or a folder there is an error, never a hang."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, more than a record's {limit}")
        return handle.read(limit + 1)


def _load(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, checked; None when there is none; ValueError naming what is wrong with it."""
    try:
        data = _read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise ValueError("a symbolic link, not a record") from None
        raise
    try:
        record = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if _depth(record) > MAX_RECORD_DEPTH:
        raise ValueError(f"nested deeper than {MAX_RECORD_DEPTH}")
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object but a {type(record).__name__}")
    for key, expected in _FIELD_TYPES.items():
        if key in record and record[key] is not None and not isinstance(record[key], expected):
            raise ValueError(f"{key}: expected {getattr(expected, '__name__', 'a number')}")
    if record.get("name", path.stem) != path.stem:
        raise ValueError(f"it names the job {record['name']!r}")
    return record


def _no_constant(name: str) -> None:
    """JSON's non-standard NaN/Infinity/-Infinity: no record kftrain writes holds one (its age, a sort key)."""
    raise ValueError(f"a non-finite number ({name})")


def _finite(text: str) -> float:
    """A JSON number as a float, refused when it overflows to infinity (``1e999``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a non-finite number ({text[:20]})")
    return value


def _depth(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (iteratively: a hostile record must not exhaust the stack)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_RECORD_DEPTH:
                todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _unreadable(path: Path, why: str) -> dict[str, Any]:
    try:
        created = path.lstat().st_mtime
    except OSError:
        created = 0.0
    return {"name": path.stem, "phase": UNREADABLE, "reason": f"{path.name}: {why}", "created": created}

"""The local backend's record of its jobs, so ``kftrain jobs`` can list and operate them from another shell.

One JSON file per job in the state folder (``$KFTRAIN_STATE_DIR``, else ``~/.kftrain/jobs``), written
atomically when the job starts and when it ends: its kind, labels, when it started, the launcher's pid (a
running job whose launcher is gone is ``Lost``), its phase, the folder of its replicas' live logs and, when
its program was given a model URI, where its logs are kept afterwards (``<model>-logs``). A record that cannot
be written is skipped: a job never fails for its bookkeeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

STATE_DIR_ENV = "KFTRAIN_STATE_DIR"
RUNNING, LOST = "Running", "Lost"


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".kftrain" / "jobs")


def _path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def write(name: str, **fields: Any) -> None:
    """Create or update the record of job ``name`` with ``fields``."""
    with contextlib.suppress(OSError, ValueError):
        record = read(name) or {"name": name, "created": time.time()}
        record.update(fields)
        target = _path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        tmp.write_text(json.dumps(record, sort_keys=True))
        tmp.replace(target)


def read(name: str) -> dict[str, Any] | None:
    """The record of job ``name`` (phase ``Lost`` when it claims to run but its launcher is gone); None if none."""
    try:
        record: dict[str, Any] = json.loads(_path(name).read_text())
    except (OSError, ValueError):
        return None
    if record.get("phase") == RUNNING and not _alive(record.get("launcher_pid")):
        record["phase"] = LOST
    return record


def records() -> list[dict[str, Any]]:
    """Every recorded job, newest first."""
    found = [read(p.stem) for p in state_dir().glob("*.json")] if state_dir().is_dir() else []
    return sorted((r for r in found if r), key=lambda r: -float(r.get("created", 0)))


def remove(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _path(name).unlink()


def _alive(pid: Any) -> bool:
    try:
        return bool(pid) and psutil.pid_exists(int(pid)) and psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False

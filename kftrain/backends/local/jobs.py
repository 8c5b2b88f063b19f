"""The local backend's jobs, as ``kftrain jobs`` sees them from any shell: listed and described from the state
folder (:mod:`kftrain.backends.local.state`; this user's jobs, or every user's in a shared folder), their replicas'
logs read live from the job's work folder (else the kept ones), followed while the job runs, and deleted by stopping
the launcher that runs them, then removing everything of the job: its record, what it left in the state folder, and
the folders kftrain made for it should its launcher have died without removing them. A record is untrusted: a live
log is read only from within the work folder it names, never through a link
(:func:`kftrain.backends.local.state.open_log`), a replica's name is never a path, and only folders kftrain made for
that job are removed (:func:`kftrain.backends.local.workdirs.remove_owned`)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from kftrain.backends.base import JobStatus
from kftrain.backends.kept import read_kept
from kftrain.backends.local import state as local_state
from kftrain.backends.local.workdirs import remove_owned
from kftrain.errors import KftrainError
from kftrain.job.naming import RUN_ID_LABEL, TASK_ID_LABEL

Line = tuple[str, str]  # (replica, one line of its log)


def list_jobs(every_user: bool = False) -> list[JobStatus]:
    return [_status(r) for r in local_state.records(every_user)]


def get_job(name: str) -> JobStatus:
    return _status(_record(name))


def _record(name: str) -> dict[str, Any]:
    local_state.own_state_dir(create=False)  # another user's default folder is refused, naming the way out
    record = local_state.read(name)
    if record is None:
        raise KftrainError(f"no local job named {name} (in {local_state.state_dir()})")
    return record


def _status(r: dict[str, Any]) -> JobStatus:
    if r.get("phase") == local_state.UNREADABLE:
        return JobStatus(name=r["name"], kind="", phase=r["phase"], created=r["created"], details=(r["reason"],))
    labels = r.get("labels") or {}
    details = []
    if r.get("reason"):
        details.append(f"reason: {r['reason']}")
    if r.get("message"):
        details.append(f"message: {r['message']}")
    if r.get("exit_code"):
        details.append(f"exit code: {r['exit_code']}")
    details.append(f"replicas: {', '.join(r.get('replicas') or [])}")
    details.append(f"launched by pid {r.get('launcher_pid')}")
    return JobStatus(
        name=r["name"],
        kind=r.get("kind", ""),
        phase=r.get("phase", ""),
        created=float(r.get("created", 0)),
        run_id=labels.get(RUN_ID_LABEL, ""),
        task_id=labels.get(TASK_ID_LABEL, ""),
        details=tuple(details),
        model_uri=r.get("model_uri", ""),
        logs_uri=r.get("logs_uri", ""),
        kept_logs=str(local_state.logs_dir(r["name"])),
        kept_files=str(local_state.files_dir(r["name"])),
    )


def job_logs(name: str, replica: str | None, tail: int | None, follow: bool) -> Iterator[Line]:
    r = _record(name)
    if replica is not None and not local_state.is_replica_label(replica):
        raise KftrainError(f"{replica!r} is not a replica's name (worker-1)")
    workdir = r.get("workdir") or ""
    live = Path(workdir) / "logs"
    labels = [replica] if replica else _labels(r)
    offsets: dict[str, int] = {}  # live log -> how much of it was printed
    found = False
    for label in labels:
        log = local_state.open_log(live, label) if workdir else None
        if log is not None:
            with log:
                data = log.read()
            # Following, only whole lines now: the rest of a line being written comes with what follows.
            offsets[label] = data.rfind(b"\n") + 1 if follow else len(data)
            text: str | None = data[: offsets[label]].decode("utf-8", "replace")
        else:  # the job's work folder is gone: the end kept beside its record, else the logs kept with its model
            text = local_state.kept_log(name, label)
            if text is None:
                text = read_kept(r.get("logs_uri", ""), label)
        found = found or text is not None
        lines = (text or "").splitlines()
        for line in lines[-tail:] if tail else lines:
            yield label, line
    if not found and r.get("phase") != local_state.RUNNING:
        raise KftrainError(
            f"no logs of job {name} are left"
            + (f" of replica {replica}" if replica else "")
            + f" (in {live}, {local_state.logs_dir(name)} or with its model): the local backend keeps the logs of "
            "the newest finished jobs (LocalConfig.keep_finished)"
        )
    if follow and r.get("phase") == local_state.RUNNING and workdir:
        yield from _follow(name, live, labels, offsets, joining=replica is None)


def _labels(record: dict[str, Any]) -> list[str]:
    """The replicas a record lists, those that are replicas' names (a path there is no replica's)."""
    return [label for label in record.get("replicas") or [] if local_state.is_replica_label(label)]


def _follow(name: str, live: Path, labels: list[str], offsets: dict[str, int], joining: bool) -> Iterator[Line]:
    """The whole lines appended to the replicas' live logs from ``offsets`` on, until the job has ended;
    ``joining``: also of the replicas the job starts meanwhile (scaled up), from their first line."""
    while True:
        record = local_state.read(name) or {}
        running = record.get("phase") == local_state.RUNNING
        if joining:
            labels += [label for label in _labels(record) if label not in labels]
        printed = False
        for label in labels:
            log = local_state.open_log(live, label)
            if log is None:
                continue  # not started yet (or its folder is gone with the job)
            with log:
                log.seek(offsets.get(label, 0))
                data = log.read()
            whole = data[: data.rfind(b"\n") + 1]
            offsets[label] = offsets.get(label, 0) + len(whole)
            for line in whole.decode("utf-8", "replace").splitlines():
                printed = True
                yield label, line
        if not running:
            return  # what the replicas wrote before the job ended is printed
        if not printed:
            time.sleep(0.2)


def delete_job(name: str) -> None:
    r = _record(name)
    path = local_state.record_path(name)
    if path.exists() and not local_state.is_mine(path):
        owner = path.lstat().st_uid
        raise KftrainError(f"job {name} was launched by another user (uid {owner}): only that user can delete it")
    # The job's launcher is the process holding its name's lock, never a pid a record names (a record is
    # untrusted: a forged one may name any process of this user's, a garbage one none while the job runs). It stops
    # every replica, as on cancel, and removes the job's folders; the job is gone once it lets go of the lock.
    launcher = local_state.name_holder(name)
    if launcher is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            launcher.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while local_state.name_holder(name) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if local_state.name_holder(name) is not None:
            raise KftrainError(f"job {name} still runs 30s after its launcher (pid {launcher.pid}) was stopped")
    # A launcher killed outright left the job's folders behind: they go too (only those kftrain made for the job,
    # and not while a launcher still holds them).
    remove_owned(local_state.read(name) or r)
    local_state.remove(name)

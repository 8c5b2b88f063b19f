"""What outlives a job's replicas, on every backend: the logs the launch step kept beside the model
(``<model>-logs/<replica>.log``), the model itself, and, on the local backend, what the job left in the state folder
(its logs' ends, and the files its replicas wrote in their job's folders), copied out by ``kftrain jobs download``:
into folders of the caller's own, never through a link placed there (:mod:`kftrain.backends.safe_paths`)."""

from __future__ import annotations

from pathlib import Path

from kftrain import storage
from kftrain.backends import safe_paths
from kftrain.backends.base import JobStatus
from kftrain.errors import KftrainError


def kept_logs(logs_uri: str) -> list[str]:
    """The replicas whose log the launch step kept at ``logs_uri``."""
    if not logs_uri or not storage.exists(logs_uri):
        return []
    return sorted(name[: -len(".log")] for name in storage.list_files(logs_uri) if name.endswith(".log"))


def read_kept(logs_uri: str, label: str) -> str | None:
    """The kept log of replica ``label``; None when there is none."""
    source = storage.join(logs_uri, f"{label}.log") if logs_uri else ""
    if not source or not storage.exists(source):
        return None
    return storage.read_bytes(source).decode("utf-8", "replace")


def download_outputs(job: JobStatus, dest: Path) -> list[tuple[str, str, str]]:
    """Copy ``job``'s model (when it wrote one), every kept replica log (whole from beside the model, else the end the
    state folder kept) and the files it left under ``dest``: one ``(what, from, to)`` per copy, ``to`` empty for a
    model the job did not write."""
    local_logs = _regular_files(job.kept_logs, ".log")
    files = Path(job.kept_files) if job.kept_files else None
    # What the state folder kept is read only from a folder of this user's (another's placed there is refused).
    files = (
        files
        if files is not None and safe_paths.entry(files.parent, files.name, is_folder=True, any_mode=True)
        else None
    )
    files = files if files is not None and any(files.iterdir()) else None
    if not (job.model_uri or job.logs_uri or local_logs or files):
        raise KftrainError(
            f"job {job.name} records no model or logs location (it was launched without a model URI) and left no "
            "logs or files"
        )
    dest = dest.absolute()
    dest.mkdir(parents=True, exist_ok=True)
    copied: list[tuple[str, str, str]] = []
    if job.model_uri and storage.exists(job.model_uri):
        safe_paths.entry(dest, "model", is_folder=True)
        storage.download(job.model_uri, str(dest / "model"))
        copied.append(("model", job.model_uri, str(dest / "model")))
    elif job.model_uri:
        copied.append(("model", job.model_uri, ""))
    whole = kept_logs(job.logs_uri)
    logs = safe_paths.own_folder(dest, "logs", 0o755) if whole or local_logs else dest / "logs"
    for label in whole:
        source = storage.join(job.logs_uri, f"{label}.log")
        safe_paths.write_file(logs, f"{label}.log", storage.read_bytes(source), 0o666)
        copied.append(("log", source, str(logs / f"{label}.log")))
    for log in local_logs:
        if log.stem in whole:
            continue
        safe_paths.write_file(logs, log.name, log, 0o666)
        copied.append(("log", str(log), str(logs / log.name)))
    if files is not None:
        safe_paths.copy_tree(files, dest, "files")  # a link stays a link
        copied.append(("files", str(files), str(dest / "files")))
    return copied


def _regular_files(folder: str, suffix: str) -> list[Path]:
    """The regular files (not links) named ``*<suffix>`` in the local ``folder``; none when there is no folder."""
    if not folder:
        return []
    try:
        found = Path(folder).iterdir()
        return sorted(p for p in found if p.name.endswith(suffix) and p.is_file() and not p.is_symlink())
    except OSError:
        return []

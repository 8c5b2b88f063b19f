"""What outlives a job's replicas, on every backend: the logs the launch step kept beside the model
(``<model>-logs/<replica>.log``), and the model itself, copied out by ``kftrain jobs download``."""

from __future__ import annotations

from pathlib import Path

from kftrain import storage
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


def download_outputs(name: str, model_uri: str, logs_uri: str, dest: Path) -> list[tuple[str, str, str]]:
    """Copy job ``name``'s model (when it wrote one) and every kept replica log under ``dest``: one
    ``(what, from, to)`` per copy, ``to`` empty for a model the job did not write."""
    if not (model_uri or logs_uri):
        raise KftrainError(f"job {name} records no model or logs location (it was launched without a model URI)")
    dest = dest.absolute()
    copied: list[tuple[str, str, str]] = []
    if model_uri and storage.exists(model_uri):
        storage.download(model_uri, str(dest / "model"))
        copied.append(("model", model_uri, str(dest / "model")))
    else:
        copied.append(("model", model_uri, ""))
    for label in kept_logs(logs_uri):
        source = storage.join(logs_uri, f"{label}.log")
        target = dest / "logs" / f"{label}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(source))
        copied.append(("log", source, str(target)))
    return copied

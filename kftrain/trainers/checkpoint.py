"""Checkpoints by URI: written atomically, found newest-complete-first, at a step or time frequency."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from kftrain import storage

log = logging.getLogger(__name__)

_CKPT_RE = re.compile(r"^ckpt-(\d{10})$")


def checkpoint_uri(root: str, step: int) -> str:
    return storage.join(root, f"ckpt-{step:010d}")


def complete_checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, uri) of every complete checkpoint under ``root``, oldest first."""
    if not root or not storage.exists(root):
        return []
    fs, path = storage.filesystem(root)
    found: list[tuple[int, str]] = []
    for entry in fs.ls(path, detail=False):
        name = str(entry).rstrip("/").rsplit("/", 1)[-1]
        match = _CKPT_RE.match(name)
        if match and storage.exists(storage.join(root, name, storage.COMPLETE_MARKER)):
            found.append((int(match.group(1)), storage.join(root, name)))
    return sorted(found)


def latest_checkpoint(root: str) -> tuple[int, str] | None:
    """(step, uri) of the newest complete checkpoint under ``root``; None when there is none."""
    found = complete_checkpoints(root)
    return found[-1] if found else None


@dataclass
class CheckpointPolicy:
    """Save every ``every_steps`` steps and/or every ``every_seconds`` seconds; keep the newest ``keep``."""

    every_steps: int = 0
    every_seconds: float = 0.0
    keep: int = 3
    _last_time: float = 0.0

    def __post_init__(self) -> None:
        self._last_time = time.monotonic()

    def due(self, step: int) -> bool:
        if self.every_steps and step % self.every_steps == 0:
            return True
        return bool(self.every_seconds) and time.monotonic() - self._last_time >= self.every_seconds

    def saved(self) -> None:
        self._last_time = time.monotonic()


def prune(root: str, keep: int) -> None:
    """Remove all but the newest ``keep`` complete checkpoints under ``root`` (none when ``keep`` <= 0)."""
    found = complete_checkpoints(root)
    fs, _ = storage.filesystem(root)
    for _, uri in found[:-keep] if keep > 0 else []:
        _, path = storage.filesystem(uri)
        fs.rm(path, recursive=True)
        log.debug("removed old checkpoint %s", uri)

"""Checkpoints by URI: written atomically, found newest-complete-first, published in the background.

:class:`Checkpointer` publishes an in-memory snapshot as ``ckpt-<step>`` (files, then ``_COMPLETE.json``) while
training goes on, at most ``max_in_flight`` at once, in step order, pruning to the newest ``keep``; ``close`` raises
the first upload error, so no checkpoint is lost silently. To an object store a snapshot is spooled locally
(``$KFTRAIN_CHECKPOINT_SPOOL``) and uploaded by a child process that ends with its trainer: from a thread, the upload
held the GIL and slowed an 806 MB checkpoint's training steps by about 20 %, from a child by about 8 %
(bench/programs/checkpoint_stall.py). :func:`latest_checkpoint` ignores incomplete folders.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.storage.uri import is_local

log = logging.getLogger(__name__)

_CKPT_RE = re.compile(r"^ckpt-(\d{10})$")
SPOOL_ENV = "KFTRAIN_CHECKPOINT_SPOOL"
# What the child process runs: upload_from_spool(PARENT_PID, SPOOL, DST) from this module.
_UPLOAD = "import sys; from kftrain.programs.checkpoint import upload_from_spool; upload_from_spool(*sys.argv[1:4])"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


class CheckpointError(KftrainError):
    """A checkpoint could not be published."""


Writer = Callable[[storage.ArtifactWriter], None]
_DONE = object()


class Checkpointer:
    """Publishes checkpoints under ``root`` on a background thread, at most ``max_in_flight`` at a time.

    ``save(step, write, metadata)`` hands over ``write``, which fills the checkpoint's ArtifactWriter from a
    snapshot the caller took (it must not read live training state: it runs while training goes on).
    """

    def __init__(self, root: str, *, keep: int = 3, max_in_flight: int = 1) -> None:
        if max_in_flight < 0:
            raise ValueError(f"max_in_flight must be >= 0, got {max_in_flight}")
        self.root = root
        self.keep = keep
        self.max_in_flight = max_in_flight
        self._slots = threading.Semaphore(max(1, max_in_flight))
        self._queue: queue.Queue[Any] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.waited_s = 0.0  # time save() spent waiting for a free slot

    def save(self, step: int, write: Writer, metadata: dict[str, Any] | None = None) -> None:
        """Publish ``ckpt-<step>`` (in the background unless ``max_in_flight`` is 0)."""
        self._raise_failure()
        if self.max_in_flight == 0:
            self._publish(step, write, metadata or {})
            return
        if not self._slots.acquire(blocking=False):
            started = time.monotonic()
            log.info("checkpoint at step %d waits: %d already in flight", step, self.max_in_flight)
            self._slots.acquire()
            self.waited_s += time.monotonic() - started
        self._raise_failure()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="checkpoint-upload", daemon=True)
            self._thread.start()
        self._queue.put((step, write, metadata or {}))

    def wait(self) -> None:
        """Until every checkpoint handed over is published; raises the first upload error."""
        if self._thread is not None:
            self._queue.put(_DONE)
            self._thread.join()
            self._thread = None
        self._raise_failure()

    close = wait

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.wait()
        elif self._thread is not None:
            # Training failed: still finish what was handed over, but let the training error be the one raised.
            try:
                self.wait()
            except Exception:
                log.exception("a checkpoint upload also failed")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            step, write, metadata = item
            try:
                if self._error is None:  # after a failure nothing more is published: the trainer fails anyway
                    self._publish(step, write, metadata)
            except BaseException as exc:  # surfaced to the training thread by save() / wait()
                log.error("checkpoint at step %d failed: %s", step, exc)
                self._error = exc
            finally:
                self._slots.release()

    def _publish(self, step: int, write: Writer, metadata: dict[str, Any]) -> None:
        uri, metadata = checkpoint_uri(self.root, step), {"step": step, **metadata}
        if self.max_in_flight == 0 or is_local(uri):  # nothing to overlap, or only local file writes
            with storage.ArtifactWriter(uri, metadata=metadata) as w:
                write(w)
        else:
            self._publish_apart(uri, write, metadata)
        log.info("checkpoint complete at step %d: %s", step, uri)
        prune(self.root, self.keep)

    def _publish_apart(self, uri: str, write: Writer, metadata: dict[str, Any]) -> None:
        """Write the checkpoint to a local spool, then publish it at ``uri`` from a child process."""
        spool = tempfile.mkdtemp(prefix="kftrain-checkpoint-", dir=os.environ.get(SPOOL_ENV) or None)
        try:
            local = _spooled(spool)
            with storage.ArtifactWriter(local, metadata=metadata) as w:
                write(w)
            argv = [sys.executable, "-c", _UPLOAD, str(os.getpid()), spool, uri]
            child = subprocess.run(argv, capture_output=True, text=True)
            if child.returncode != 0:
                lines = child.stderr.strip().splitlines() or [f"exit code {child.returncode}"]
                raise CheckpointError(f"uploading {uri} failed: {lines[-1]}")
        finally:
            shutil.rmtree(spool, ignore_errors=True)

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise CheckpointError(f"a checkpoint upload to {self.root} failed: {self._error}") from self._error


def upload_from_spool(parent_pid: str, spool: str, dst: str) -> None:
    """The child process's entry: publish the checkpoint spooled in ``spool`` as ``dst``.

    It ends with its trainer: a trainer killed mid-upload must not have a checkpoint completed behind it,
    after a restarted replica has chosen where to resume and may be writing the same step. On Linux the
    kernel sends SIGTERM when the thread that started this process ends (``PR_SET_PDEATHSIG``; that thread
    waits for this process, so only the trainer's death ends it first); elsewhere only a trainer already
    gone at start is noticed. Either way the spool, which the trainer would have removed, is removed here.
    """

    def orphaned(signum: int, _frame: object) -> None:
        shutil.rmtree(spool, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, orphaned)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent_pid):  # it ended before the request above
        orphaned(signal.SIGTERM, None)
    storage.upload(_spooled(spool), dst)  # a complete artifact: its listed files, checked, then its marker


def _spooled(spool: str) -> str:
    return os.path.join(spool, "ckpt")

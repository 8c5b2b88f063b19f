"""A replica's output: kept whole in its log file, and shown line by line, each line bounded.

The reader must never stop draining the replica's pipe while the replica lives: a replica blocked on a
full pipe would hang the job. So the log file gets every byte as it comes, the console and the failure
message get lines of at most :data:`MAX_LINE_BYTES` (a longer line is cut, saying how much was left out
and where the whole of it is), memory stays bounded however long a line is, and a console that went away
(``kftrain launch ... | head``) or a log file that cannot be written only stops that output.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from kftrain.errors import KftrainError

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024
_READ_SIZE = 64 * 1024


class LineSplitter:
    """Bytes in, bounded lines out: each line cut at :data:`MAX_LINE_BYTES`, the rest only counted."""

    def __init__(self, emit: Callable[[str], None], log_path: Path, max_line: int = MAX_LINE_BYTES) -> None:
        self._emit = emit
        self._log_path = log_path
        self._max = max_line
        self._pending = bytearray()
        self._dropped = 0

    def feed(self, chunk: bytes) -> None:
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            room = max(0, self._max - len(self._pending))
            self._pending += chunk[start : start + min(room, end - start)]
            self._dropped += max(0, end - start - room)
            if newline < 0:
                return
            self._flush()
            start = newline + 1

    def close(self) -> None:
        if self._pending or self._dropped:
            self._flush()

    def _flush(self) -> None:
        line = self._pending.decode("utf-8", errors="replace").rstrip("\r")
        if self._dropped:
            line += f" ... [line cut: {self._dropped} more bytes, all of it in {self._log_path}]"
        self._pending.clear()
        self._dropped = 0
        self._emit(line)


def open_logs_folder(workdir: Path) -> int:
    """The job's logs folder (``workdir/logs``, made here), open as a directory: every replica log is opened through
    it, never by path, so a work folder moved away or swapped for a link while the job runs gets no byte written
    through the link (the logs go on into the folder the job made)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        (workdir / "logs").mkdir(exist_ok=True)
        top = os.open(workdir, flags)
        try:
            return os.open("logs", flags, dir_fd=top)
        finally:
            os.close(top)
    except OSError as exc:
        raise KftrainError(
            f"work folder {workdir}: its logs folder cannot be used ({exc.strerror or exc}); "
            "it must be a folder, not a link or a file"
        ) from exc


def open_replica_log(logs_fd: int, log_path: Path) -> IO[bytes] | None:
    """Replica log ``log_path``'s file, opened to append in the logs folder ``logs_fd`` (:func:`open_logs_folder`),
    never through a link; None, said once, when it cannot be (the replica still runs: only its log file is lost)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(log_path.name, flags, 0o644, dir_fd=logs_fd)
    except OSError as exc:
        log.warning("cannot write the replica log %s: %s", log_path, exc)
        return None
    return os.fdopen(fd, "ab")


def pump(stream: IO[bytes], log_file: IO[bytes] | None, log_path: Path, on_line: Callable[[str], None]) -> None:
    """Copy ``stream`` to ``log_file`` (replica log ``log_path``, opened by the caller: None when it could not be)
    and hand its lines to ``on_line`` until end of file, whatever fails; both are closed at the end."""
    splitter = LineSplitter(_contained(on_line, "console"), log_path)
    with contextlib.ExitStack() as closing:
        closing.callback(stream.close)
        if log_file is not None:
            closing.enter_context(log_file)
        while chunk := _read(stream):
            if log_file is not None:
                try:
                    log_file.write(chunk)
                    log_file.flush()
                except OSError as exc:
                    log.warning("stopped writing the replica log %s: %s", log_path, exc)
                    log_file = None
            splitter.feed(chunk)
        splitter.close()


def _read(stream: IO[bytes]) -> bytes:
    read1 = getattr(stream, "read1", None)
    return bytes(read1(_READ_SIZE) if read1 is not None else stream.read(_READ_SIZE))


def _contained(on_line: Callable[[str], None], what: str) -> Callable[[str], None]:
    """``on_line``, but an error in it stops only that output, never the draining."""
    failed = False

    def call(line: str) -> None:
        nonlocal failed
        if failed:
            return
        try:
            on_line(line)
        except Exception as exc:  # whatever broke, the pipe must keep being drained
            failed = True
            log.debug("%s output stopped: %s", what, exc)

    return call

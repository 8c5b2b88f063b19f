"""Bytes by URI: small reads and writes, streaming in chunks, hashing, and copying one file.

Everything streams in :data:`CHUNK`-sized pieces (flat memory) and hashes as it streams; to and from S3 several parts
are in flight (:mod:`kftrain.storage.s3_transfer`, ``KFTRAIN_S3_MAX_CONCURRENCY``). Transient faults are retried:
each ranged read alone, a failed write from its source. A half-written file is never visible: multipart uploads
appear on completion, local files are renamed into place, and a write that raises is discarded.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, TypeVar

from kftrain.storage import partials, s3_transfer
from kftrain.storage.errors import StorageError, errors, is_s3, unreachable, with_retry
from kftrain.storage.paths import confine, local_target
from kftrain.storage.uri import check_output_uri, filesystem, is_local

T = TypeVar("T")
Progress = Callable[[int], None]  # called with the byte count of every chunk moved

CHUNK = 8 * 1024 * 1024  # the read size, the upload part size and the memory bound per stream
_MIN_PART = 5 * 1024 * 1024  # S3 (and s3fs) refuse smaller multipart parts


def part_size() -> int:
    """The upload part size: :data:`CHUNK`, but never below S3's minimum part."""
    return max(CHUNK, _MIN_PART)  # read CHUNK at call time: tests shrink it


@dataclass(frozen=True)
class FileDigest:
    """Size and SHA-256 of one file, as recorded in the completion marker."""

    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256}


# --------------------------------------------------------------------------------------------------
# Small reads and writes


def exists(uri: str) -> bool:
    """Whether a file or folder exists at ``uri``."""
    fs, path = filesystem(uri)
    with errors(uri, fs):
        return bool(with_retry(f"exists {uri}", lambda: fs.exists(path)))


@contextmanager
def open_uri(uri: str, mode: str = "rb") -> Iterator[IO[Any]]:
    """Open ``uri``. A write that raises is discarded (never committed half-way), unlike fsspec's default."""
    fs, path = filesystem(check_output_uri(uri) if "r" not in mode else uri)
    if "w" in mode and is_local(uri):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with errors(uri, fs):
        handle = fs.open(path, mode, block_size=part_size()) if "b" in mode else fs.open(path, mode)
    try:
        yield handle
    except BaseException as exc:
        _discard(handle, exc)
        raise
    with errors(uri, fs):
        handle.close()


def _discard(handle: IO[Any], reason: BaseException | None = None) -> None:
    """Drop a half-written file: abort the multipart upload instead of completing it on close.

    When the server is unreachable the abort is skipped: it would only wait through another round of
    retries, and an unfinished multipart upload is invisible to readers (a lifecycle rule reaps it).
    """
    writable = getattr(handle, "writable", None)
    if callable(writable) and writable() and hasattr(handle, "discard"):
        if not unreachable(reason):
            with suppress(Exception):  # best effort; the server may be the reason we are here
                handle.discard()
        with suppress(Exception):
            handle.buffer = None  # type: ignore[attr-defined]  # what discard() does, minus the request
        with suppress(Exception):
            handle.closed = True  # type: ignore[misc]  # AbstractBufferedFile: stop close() from committing
    with suppress(Exception):
        handle.close()


def read_bytes(uri: str) -> bytes:
    """The whole content of ``uri``, in memory: for small files (manifests, metadata)."""
    fs, path = filesystem(uri)
    with errors(uri, fs):
        return bytes(with_retry(f"read {uri}", lambda: fs.cat_file(path)))


def read_json(uri: str) -> Any:
    """The JSON document at ``uri``."""
    return json.loads(read_bytes(uri))


def list_files(uri: str) -> list[str]:
    """Relative POSIX paths of every file under ``uri``, sorted; each confined (:func:`~.paths.confine`).

    Object keys are taken as they are, never normalized: a key ``x/../../name`` is refused, naming it,
    rather than read or written somewhere else. A local file that is a symbolic link leading out of ``uri``
    is refused, naming it: whatever reads the listing (a copy, an export, an upload) would read the file it
    points to, anywhere on the machine.
    """
    fs, path = filesystem(uri)
    base = path.rstrip("/")
    with errors(uri, fs):
        found = with_retry(f"list {uri}", lambda: fs.find(base))
    rels = []
    for full in found:
        if is_local(uri):
            rel = os.path.relpath(full, base).replace(os.sep, "/")
            local_target(base, rel)
        elif full.startswith(base + "/"):
            rel = full[len(base) + 1 :]
        else:
            continue  # an object at the folder's own key is not inside it
        rels.append(confine(rel, f"{uri} (listing)"))
    return sorted(rels)


# --------------------------------------------------------------------------------------------------
# Streaming


def iter_chunks(uri: str, *, progress: Progress | None = None) -> Iterator[bytes]:
    """The bytes of ``uri`` in chunks of at most CHUNK; each remote chunk is a ranged read, retried alone."""
    fs, path = filesystem(uri)
    if is_local(uri):
        with errors(uri, fs), open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                if progress:
                    progress(len(chunk))
                yield chunk
        return
    with errors(uri, fs):
        size = int(with_retry(f"stat {uri}", lambda: fs.info(path)["size"]))
    spans = ((start, min(start + CHUNK, size)) for start in range(0, size, CHUNK))
    # Several ranges are fetched ahead (s3_transfer.ranged_reads); chunks still come out in order, and a
    # range whose prefetch failed is re-read on its own under the usual retry policy.
    for (start, end), prefetched in s3_transfer.ranged_reads(fs, path, spans):
        with errors(uri, fs):
            chunk = with_retry(
                f"read {uri} [{start}:{end}]",
                _first_then(prefetched.result, partial(fs.cat_file, path, start=start, end=end)),
            )
        if len(chunk) != end - start:
            # A short ranged read means the object changed or shrank under us; do not stitch versions.
            raise StorageError(f"{uri}: expected {end - start} bytes at offset {start}, got {len(chunk)}")
        if progress:
            progress(len(chunk))
        yield chunk


def _first_then(first: Callable[[], T], again: Callable[[], T]) -> Callable[[], T]:
    """An operation for :func:`with_retry` whose first attempt is ``first`` and every retry ``again``."""
    calls = 0

    def attempt() -> T:
        nonlocal calls
        calls += 1
        return first() if calls == 1 else again()

    return attempt


class _HashedChunks:
    """Iterates ``chunks`` unchanged while counting and hashing them: every write path records the same way."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._digest = hashlib.sha256()
        self._size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._digest.update(chunk)
            self._size += len(chunk)
            yield chunk

    def file_digest(self) -> FileDigest:
        return FileDigest(self._size, self._digest.hexdigest())


def digest_of(uri: str) -> FileDigest:
    """Size and SHA-256 of the file at ``uri``, streamed."""
    hashed = _HashedChunks(iter_chunks(uri))
    for _ in hashed:
        pass
    return hashed.file_digest()


def sha256_of(uri: str) -> str:
    """The SHA-256 of the file at ``uri``, streamed."""
    return digest_of(uri).sha256


def write_once(chunks: Iterator[bytes], dst_uri: str) -> FileDigest:
    """One attempt at writing ``chunks`` to ``dst_uri``; nothing is visible at ``dst_uri`` unless it succeeds."""
    fs, path = filesystem(check_output_uri(dst_uri))
    hashed = _HashedChunks(chunks)
    if is_local(dst_uri):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        partial, fd = partials.open_staging_file(path)  # locked while written: see partials.clean_stale
        try:
            with open(fd, "wb", closefd=False) as out:
                for chunk in hashed:
                    out.write(chunk)
            os.replace(partial, path)  # readers see the old file or the whole new one
        except BaseException:
            with suppress(FileNotFoundError):
                os.remove(partial)
            raise
        finally:
            partials.release(fd)
    elif is_s3(fs):
        # A multipart upload with several parts in flight; it becomes an object only on completion.
        upload = s3_transfer.MultipartUpload(fs, path, part_size=part_size())
        try:
            upload.run(hashed)
        except BaseException as exc:
            if not unreachable(exc):  # else the abort would only wait through more retries; see _discard
                upload.abort()
            raise
    else:
        # Other object stores (gs://): fsspec's buffered writer, which commits only on a clean close.
        handle = fs.open(path, "wb", block_size=part_size())
        try:
            for chunk in hashed:
                handle.write(chunk)
            handle.close()
        except BaseException as exc:
            _discard(handle, exc)
            raise
    return hashed.file_digest()


def copy_file(src_uri: str, dst_uri: str, progress: Progress | None = None) -> FileDigest:
    """Copy one file from ``src_uri`` to ``dst_uri``, streaming; its size and SHA-256 as copied."""
    # Reads are retried per chunk inside iter_chunks; a write that still fails is restarted from the
    # source, which is always re-readable here (a file or an object), so the result is byte-identical.
    with errors(dst_uri, filesystem(dst_uri)[0]):
        return with_retry(
            f"copy {src_uri} -> {dst_uri}", lambda: write_once(iter_chunks(src_uri, progress=progress), dst_uri)
        )


def is_file(uri: str) -> bool:
    """Whether ``uri`` is a file (on object stores: an object at exactly that key)."""
    fs, path = filesystem(uri)
    with errors(uri, fs):
        return bool(with_retry(f"isfile {uri}", lambda: fs.isfile(path)))


def is_dir(uri: str) -> bool:
    """Whether ``uri`` is a folder (on object stores: a prefix with objects under it)."""
    fs, path = filesystem(uri)
    with errors(uri, fs):
        return bool(with_retry(f"isdir {uri}", lambda: fs.isdir(path)))

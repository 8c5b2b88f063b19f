"""Atomic artifacts: a folder is complete only once its completion marker says so.

:class:`ArtifactWriter` stages the files, writes the marker listing each with its size and SHA-256, then publishes
(:mod:`kftrain.storage.publish`): a writer that dies leaves nothing that looks complete. :func:`copy` (and
:func:`upload`, :func:`download`) copy the files the marker lists, each checked as it streams, the marker last; a
listed file missing or changed fails the copy before anything is published. Readers: :func:`require_complete`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from kftrain.storage import partials
from kftrain.storage.errors import StorageError, no_room, storage_error, with_retry
from kftrain.storage.io import (
    FileDigest,
    Progress,
    copy_file,
    digest_of,
    exists,
    is_dir,
    list_files,
    open_uri,
    read_bytes,
    write_once,
)
from kftrain.storage.marker import COMPLETE_MARKER, Manifest, parse
from kftrain.storage.paths import confine, local_target
from kftrain.storage.publish import Destination, open_destination
from kftrain.storage.reader import ArtifactReader
from kftrain.storage.uri import filesystem, is_local, join, local_path

# --------------------------------------------------------------------------------------------------
# Writing and reading artifacts


class _HashingWriter:
    """A write handle that hashes what passes through, so recording a streamed file needs no re-read."""

    def __init__(self, handle: IO[Any]) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0
        self.valid = True  # False once the caller seeks or writes text: then record() re-reads the file

    def write(self, data: Any) -> int:
        if isinstance(data, bytes | bytearray | memoryview):
            self.digest.update(data)
            self.size += len(data)
        else:
            self.valid = False
        return int(self._handle.write(data))

    def seek(self, *args: Any) -> int:
        self.valid = False
        return int(self._handle.seek(*args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)


@dataclass
class ArtifactWriter:
    """Writes the files of one output artifact; publishes them only when everything was written.

    Made before anything is written, it refuses an output that is not empty and not a previous kftrain
    artifact (an output never deletes what it did not write). Files go to a staging sibling; on an
    exception the staging is removed and the previous version, if any, is untouched.
    """

    uri: str
    metadata: dict[str, Any] = field(default_factory=dict)
    _entries: dict[str, FileDigest] = field(default_factory=dict)
    _staging: str = ""

    def __post_init__(self) -> None:
        self._destination: Destination = open_destination(self.uri)
        self._staging = self._destination.staging_uri

    def path_for(self, relpath: str) -> str:
        """Where to write ``relpath``: a local path to hand to libraries that want one, or a URI."""
        if relpath == COMPLETE_MARKER:
            raise StorageError(f"{self.uri}: {COMPLETE_MARKER} is the artifact's own marker; name the file otherwise")
        confine(relpath, self.uri)  # named by the output, not by its staging
        if is_local(self._staging):
            return local_target(self._staging, relpath)
        return join(self._staging, *relpath.split("/"))

    @contextmanager
    def open(self, relpath: str, mode: str = "wb") -> Iterator[IO[Any]]:
        """A handle to write ``relpath`` in the artifact; the file is recorded (size, SHA-256) as it closes."""
        target = self.path_for(relpath)
        with open_uri(target, mode) as handle:
            hashing = _HashingWriter(handle)
            yield hashing  # type: ignore[misc]  # duck-typed IO: everything else is delegated
        if hashing.valid:
            self._entries[relpath] = FileDigest(hashing.size, hashing.digest.hexdigest())
        else:
            self.record(relpath)

    def write_bytes(self, relpath: str, data: bytes) -> None:
        """Write ``data`` as ``relpath``."""
        with self.open(relpath, "wb") as handle:
            handle.write(data)

    def write_json(self, relpath: str, obj: Any) -> None:
        """Write ``obj`` as JSON (indented, keys sorted: stable bytes, stable checksums) as ``relpath``."""
        self.write_bytes(relpath, json.dumps(obj, indent=2, sort_keys=True).encode())

    def record(self, relpath: str) -> None:
        """Account for a file written at ``path_for(relpath)`` by another library."""
        self._entries[relpath] = digest_of(self.path_for(relpath))

    def add(self, src: str | os.PathLike[str], relpath: str = "", *, progress: Progress | None = None) -> None:
        """Copy a local file or folder (or any URI; an artifact as the files its marker lists, checked) into
        the artifact at ``relpath``, hashing as it streams."""
        src = os.fspath(src)
        if not is_dir(src):
            if not relpath:
                raise StorageError(f"{src}: a single file needs a relpath inside {self.uri}")
            if not exists(src):
                raise _not_found(src)
            self._entries[relpath] = copy_file(src, self.path_for(relpath), progress)
            return
        _, sources = _sources(src)
        for rel, source, expected in sources:
            key = posixpath.join(relpath, rel) if relpath else rel
            self._entries[key] = _copy_checked(source, self.path_for(key), expected, progress)

    def commit(self) -> dict[str, Any]:
        """Write the marker (every file's size and SHA-256, and the metadata) and publish; the manifest."""
        manifest = Manifest(dict(sorted(self._entries.items())), self.metadata)
        marker = join(self._staging, COMPLETE_MARKER)
        with_retry(f"write {marker}", lambda: write_once(iter([manifest.to_bytes()]), marker))
        self._destination.promote(manifest)
        return manifest.public()

    def abort(self) -> None:
        """Remove what was written; without a marker it was never readable as complete anyway."""
        self._destination.abort()

    def __enter__(self) -> ArtifactWriter:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            try:
                self.commit()
            except BaseException as failed:
                self.abort()
                self._no_room(failed)
                raise
        else:
            self.abort()
            self._no_room(exc)

    def _no_room(self, exc: BaseException) -> None:
        """A write that failed for lack of room (wherever it was written from: a library, a shard writer) is said
        as this output's error, once the staging is gone."""
        room = no_room(exc)
        if room is not None:
            raise StorageError(f"{self.uri}: nothing was published: {room} ({type(exc).__name__}: {exc})") from exc


def require_complete(uri: str, *, verify: bool = False) -> dict[str, Any]:
    """The completion manifest of the artifact at ``uri``, its files all there at their listed sizes; with
    ``verify`` every checksum is checked too. Read the files through :class:`ArtifactReader` to have each
    one checked as it is read."""
    reader = ArtifactReader(uri)
    if verify:
        reader.verify()
    else:
        reader.check_sizes()
    return reader.manifest.public()


# --------------------------------------------------------------------------------------------------
# Copying files and folders


def _not_found(uri: str) -> StorageError:
    fs, _ = filesystem(uri)
    return storage_error(uri, FileNotFoundError(errno.ENOENT, "not found", uri), fs)


Source = tuple[str, str, FileDigest | None]  # (relpath, URI to read, the digest its marker lists)


def _sources(src_uri: str) -> tuple[ArtifactReader | None, list[Source]]:
    """Every file to copy from the folder ``src_uri``: an artifact's listed files (checked for presence
    and size first, and read from the version its marker names), else every file found."""
    if exists(join(src_uri, COMPLETE_MARKER)):
        reader = ArtifactReader(src_uri)
        reader.check_sizes()  # a missing or truncated file fails here, before anything is written
        return reader, [(rel, reader.uri_of(rel), digest) for rel, digest in sorted(reader.files.items())]
    files = list_files(src_uri)
    if not files:
        raise StorageError(f"{src_uri}: empty folder, nothing to copy")
    return None, [(rel, join(src_uri, *rel.split("/")), None) for rel in files]


def _copy_checked(src: str, dst: str, expected: FileDigest | None, progress: Progress | None) -> FileDigest:
    digest = copy_file(src, dst, progress)
    if expected is not None and digest != expected:
        raise StorageError(
            f"{src}: checksum mismatch (expected {expected.size} bytes sha256 {expected.sha256}, got "
            f"{digest.size} bytes sha256 {digest.sha256})"
        )
    return digest


def _target(root: str, rel: str) -> str:
    return local_target(str(local_path(root)), rel) if is_local(root) else join(root, *confine(rel, root).split("/"))


def copy(src_uri: str, dst_uri: str, *, progress: Progress | None = None) -> dict[str, FileDigest]:
    """Copy a file or a folder from ``src_uri`` to ``dst_uri`` (any two schemes), streaming in chunks.

    Returns the size and SHA-256 of every file copied, keyed by its path relative to ``src_uri`` (``""``
    for a single file). A folder that is a complete artifact is copied as the files its marker lists, each
    checked against it, and published at ``dst_uri`` like a written artifact (so ``dst_uri`` must be new,
    empty, or a previous artifact); any other folder is copied file by file into ``dst_uri``.
    """
    if not is_dir(src_uri):
        if not exists(src_uri):
            raise _not_found(src_uri)
        if is_local(dst_uri):
            partials.clean_stale(str(local_path(dst_uri)))
        return {"": copy_file(src_uri, dst_uri, progress)}
    reader, sources = _sources(src_uri)
    if reader is None:
        return {rel: _copy_checked(source, _target(dst_uri, rel), None, progress) for rel, source, _ in sources}
    destination = open_destination(dst_uri)
    try:
        copied = {
            rel: _copy_checked(source, _target(destination.staging_uri, rel), expected, progress)
            for rel, source, expected in sources
        }
        marker = join(destination.staging_uri, COMPLETE_MARKER)
        copied[COMPLETE_MARKER] = copy_file(join(reader.root, COMPLETE_MARKER), marker, None)
        manifest = parse(read_bytes(marker), dst_uri)
        if manifest.files != {rel: d for rel, d in copied.items() if rel != COMPLETE_MARKER}:
            raise StorageError(
                f"{src_uri}: re-published while being copied (its {COMPLETE_MARKER} changed); copy again"
            )
        destination.promote(manifest)
    except BaseException:
        destination.abort()
        raise
    return copied


def upload(
    local_path: str | os.PathLike[str], dst_uri: str, *, progress: Progress | None = None
) -> dict[str, FileDigest]:
    """Upload a local file or folder to ``dst_uri``; see :func:`copy`."""
    return copy(os.fspath(local_path), dst_uri, progress=progress)


def download(
    src_uri: str, local_path: str | os.PathLike[str], *, progress: Progress | None = None
) -> dict[str, FileDigest]:
    """Download a file or folder at ``src_uri`` to a local path; see :func:`copy`."""
    return copy(src_uri, os.fspath(local_path), progress=progress)

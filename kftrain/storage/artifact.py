"""Atomic artifacts: a folder is complete only once its completion marker says so.

:class:`ArtifactWriter` writes an output's files, then a marker (:data:`COMPLETE_MARKER`) listing each
file with its size and SHA-256. Readers call :func:`require_complete`, so a writer that died half-way
(a killed pod, a failed upload) leaves nothing that looks complete. :func:`copy` (and :func:`upload`,
:func:`download`) keep the rule across stores: a complete artifact is checked against its marker while
it streams and the marker is copied last, so the copy turns complete only once everything else is there.
The marker's format is known only to this module.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import IO, Any

from kftrain.storage.errors import StorageError, errors, storage_error, with_retry
from kftrain.storage.io import (
    FileDigest,
    Progress,
    copy_file,
    digest_of,
    exists,
    is_dir,
    list_files,
    open_uri,
    read_json,
    write_once,
)
from kftrain.storage.uri import filesystem, join, split_uri

COMPLETE_MARKER = "_COMPLETE.json"


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

    Local outputs are staged in a sibling folder and renamed into place (atomic on one filesystem);
    object-store outputs are written in place and become visible to readers when the marker is.
    On an exception the partial output is removed.
    """

    uri: str
    metadata: dict[str, Any] = field(default_factory=dict)
    _entries: dict[str, FileDigest] = field(default_factory=dict)
    _staging: str = ""

    def __post_init__(self) -> None:
        scheme, path = split_uri(self.uri)
        self._local = scheme == "file"
        if self._local:
            self._staging = f"{path.rstrip('/')}.partial-{uuid.uuid4().hex[:8]}"
            os.makedirs(self._staging, exist_ok=True)
        else:
            self._staging = self.uri.rstrip("/")
            marker = join(self._staging, COMPLETE_MARKER)
            if exists(marker):
                fs, p = filesystem(marker)
                with errors(marker, fs):
                    fs.rm(p)  # re-publishing: the old output stops being complete first

    def path_for(self, relpath: str) -> str:
        """Where to write ``relpath``: a local path to hand to libraries that want one, or a URI."""
        return join(self._staging, relpath)

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
        """Copy a local file or folder (or any URI) into the artifact at ``relpath``, hashing as it streams."""
        copied = copy(os.fspath(src), self.path_for(relpath) if relpath else self._staging, progress=progress)
        for rel, digest in copied.items():
            if rel == COMPLETE_MARKER and not relpath:
                continue  # a copied artifact's own marker at our root: commit() overwrites it with ours
            key = posixpath.join(relpath, rel) if rel else relpath
            if not key:
                raise StorageError(f"{src}: a single file needs a relpath inside {self.uri}")
            self._entries[key] = digest

    def commit(self) -> dict[str, Any]:
        """Write the marker (every file's size and SHA-256, and the metadata) and publish; the manifest."""
        manifest = {
            "files": {k: e.as_dict() for k, e in sorted(self._entries.items())},
            "metadata": self.metadata,
        }
        marker = join(self._staging, COMPLETE_MARKER)
        with_retry(
            f"write {marker}",
            lambda: write_once(iter([json.dumps(manifest, indent=2, sort_keys=True).encode()]), marker),
        )
        if self._local:
            _, final = split_uri(self.uri)
            if os.path.isdir(final):
                shutil.rmtree(final)  # KFP creates the output folder empty; replace it whole
            elif os.path.exists(final):
                os.remove(final)
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
            os.rename(self._staging, final)
        return manifest

    def abort(self) -> None:
        """Remove what was written; without a marker it was never readable as complete anyway."""
        if self._local:
            shutil.rmtree(self._staging, ignore_errors=True)
            return
        fs, path = filesystem(self._staging)
        for rel in self._entries:
            with suppress(Exception):  # best effort: without the marker nothing here is readable anyway
                fs.rm(posixpath.join(path, rel))

    def __enter__(self) -> ArtifactWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def require_complete(uri: str, *, verify: bool = False) -> dict[str, Any]:
    """The completion manifest of the artifact at ``uri``; with ``verify`` every size and checksum is checked."""
    marker = join(uri, COMPLETE_MARKER)
    if not exists(marker):
        if not exists(uri):
            fs, _ = filesystem(uri)
            raise storage_error(uri, FileNotFoundError(errno.ENOENT, "not found", uri), fs)
        raise StorageError(f"{uri}: incomplete artifact (no {COMPLETE_MARKER}); the step that wrote it did not finish")
    manifest: dict[str, Any] = read_json(marker)
    if verify:
        for rel, entry in manifest["files"].items():
            target = join(uri, rel)
            got = digest_of(target)
            if got.size != entry["size"] or got.sha256 != entry["sha256"]:
                raise StorageError(
                    f"{target}: checksum mismatch (expected {entry['size']} bytes sha256 {entry['sha256']}, "
                    f"got {got.size} bytes sha256 {got.sha256})"
                )
    return manifest


# --------------------------------------------------------------------------------------------------
# Copying files and folders


def copy(src_uri: str, dst_uri: str, *, progress: Progress | None = None) -> dict[str, FileDigest]:
    """Copy a file or a folder from ``src_uri`` to ``dst_uri`` (any two schemes), streaming in chunks.

    Returns the size and SHA-256 of every file copied, keyed by its path relative to ``src_uri`` (``""``
    for a single file). A folder that is a complete artifact is checked against its marker while it
    streams, and its marker is copied last, so the copy is complete only once everything else is there.
    """
    if not is_dir(src_uri):
        if not exists(src_uri):
            fs, _ = filesystem(src_uri)
            raise storage_error(src_uri, FileNotFoundError(errno.ENOENT, "not found", src_uri), fs)
        return {"": copy_file(src_uri, dst_uri, progress)}
    files = list_files(src_uri)
    if not files:
        raise StorageError(f"{src_uri}: empty folder, nothing to copy")
    manifest: dict[str, Any] | None = None
    if COMPLETE_MARKER in files:
        manifest = read_json(join(src_uri, COMPLETE_MARKER))
        files.remove(COMPLETE_MARKER)
    copied: dict[str, FileDigest] = {}
    for rel in files:
        rel_posix = rel.replace(os.sep, "/")
        digest = copy_file(join(src_uri, *rel_posix.split("/")), join(dst_uri, *rel_posix.split("/")), progress)
        expected = (manifest or {}).get("files", {}).get(rel_posix)
        if expected and expected["sha256"] != digest.sha256:
            raise StorageError(
                f"{join(src_uri, rel_posix)}: checksum mismatch (expected {expected['sha256']}, got {digest.sha256})"
            )
        copied[rel_posix] = digest
    if manifest is not None:
        copied[COMPLETE_MARKER] = copy_file(join(src_uri, COMPLETE_MARKER), join(dst_uri, COMPLETE_MARKER), None)
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

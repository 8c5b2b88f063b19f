"""Read and write artifacts by URI: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

fsspec does the I/O. ``minio://bucket/key`` (what KFP's default pipeline root uses) is S3 with
the endpoint taken from the environment (``AWS_ENDPOINT_URL`` or ``MINIO_ENDPOINT``).
Credentials come only from the environment or mounted secrets, through the usual variables.

Outputs are published atomically: :class:`ArtifactWriter` writes the files, then a completion
marker (``_COMPLETE.json``) listing each file with its size and SHA-256. Readers call
:func:`require_complete`, so a writer that died half-way leaves nothing that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import fsspec

from kftrain.errors import KftrainError

COMPLETE_MARKER = "_COMPLETE.json"
CHUNK = 8 * 1024 * 1024


class StorageError(KftrainError):
    """A URI that cannot be read or written, named in the message."""


def _split(uri: str) -> tuple[str, str]:
    if "://" not in uri:
        return "file", os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme == "file":
        return "file", rest
    if scheme == "minio":
        return "s3", rest
    return scheme, rest


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and in-filesystem path for ``uri``."""
    scheme, path = _split(uri)
    options: dict[str, Any] = {}
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("MINIO_ENDPOINT")
        if endpoint:
            if "://" not in endpoint:
                endpoint = "http://" + endpoint
            options["client_kwargs"] = {"endpoint_url": endpoint}
    try:
        fs = fsspec.filesystem(scheme, **options)
    except (ImportError, ValueError) as exc:
        raise StorageError(f"{uri}: no filesystem for {scheme}:// ({exc})") from None
    return fs, path


def join(uri: str, *parts: str) -> str:
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        return f"{scheme}://{posixpath.join(rest, *parts)}"
    return os.path.join(uri, *parts)


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return bool(fs.exists(path))


@contextmanager
def open_uri(uri: str, mode: str = "rb") -> Iterator[IO[Any]]:
    fs, path = filesystem(uri)
    if "w" in mode and fs.protocol in ("file", ("file", "local")):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
    try:
        with fs.open(path, mode) as handle:
            yield handle
    except FileNotFoundError:
        raise StorageError(f"{uri}: not found") from None
    except PermissionError as exc:
        raise StorageError(f"{uri}: permission denied ({exc})") from None


def read_bytes(uri: str) -> bytes:
    with open_uri(uri, "rb") as handle:
        return bytes(handle.read())


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def list_files(uri: str) -> list[str]:
    """Relative paths of every file under ``uri``, sorted."""
    fs, path = filesystem(uri)
    base = path.rstrip("/")
    found = fs.find(base)
    return sorted(posixpath.relpath(p, base) if fs.protocol != "file" else os.path.relpath(p, base) for p in found)


def sha256_of(uri: str) -> str:
    digest = hashlib.sha256()
    with open_uri(uri, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class _Entry:
    size: int
    sha256: str


@dataclass
class ArtifactWriter:
    """Writes the files of one output artifact; publishes them only when everything was written.

    Local outputs are staged in a sibling folder and renamed into place (atomic on one filesystem);
    object-store outputs are written in place and become visible to readers when the marker is.
    On an exception the partial output is removed.
    """

    uri: str
    metadata: dict[str, Any] = field(default_factory=dict)
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _staging: str = ""

    def __post_init__(self) -> None:
        scheme, path = _split(self.uri)
        self._local = scheme == "file"
        if self._local:
            self._staging = f"{path.rstrip('/')}.partial-{uuid.uuid4().hex[:8]}"
            os.makedirs(self._staging, exist_ok=True)
        else:
            self._staging = self.uri.rstrip("/")
            if exists(join(self._staging, COMPLETE_MARKER)):
                fs, p = filesystem(join(self._staging, COMPLETE_MARKER))
                fs.rm(p)  # re-publishing: the old output stops being complete first

    def path_for(self, relpath: str) -> str:
        """Where to write ``relpath``: a local path to hand to libraries that want one, or a URI."""
        return join(self._staging, relpath)

    @contextmanager
    def open(self, relpath: str, mode: str = "wb") -> Iterator[IO[Any]]:
        target = self.path_for(relpath)
        with open_uri(target, mode) as handle:
            yield handle
        self.record(relpath)

    def write_bytes(self, relpath: str, data: bytes) -> None:
        with self.open(relpath, "wb") as handle:
            handle.write(data)

    def write_json(self, relpath: str, obj: Any) -> None:
        self.write_bytes(relpath, json.dumps(obj, indent=2, sort_keys=True).encode())

    def record(self, relpath: str) -> None:
        """Account for a file written at ``path_for(relpath)`` by another library."""
        target = self.path_for(relpath)
        fs, path = filesystem(target)
        self._entries[relpath] = _Entry(size=int(fs.size(path)), sha256=sha256_of(target))

    def commit(self) -> dict[str, Any]:
        manifest = {
            "files": {k: {"size": e.size, "sha256": e.sha256} for k, e in sorted(self._entries.items())},
            "metadata": self.metadata,
        }
        with open_uri(join(self._staging, COMPLETE_MARKER), "wb") as handle:
            handle.write(json.dumps(manifest, indent=2, sort_keys=True).encode())
        if self._local:
            _, final = _split(self.uri)
            if os.path.isdir(final):
                shutil.rmtree(final)  # KFP creates the output folder empty; replace it whole
            elif os.path.exists(final):
                os.remove(final)
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
            os.rename(self._staging, final)
        return manifest

    def abort(self) -> None:
        if self._local:
            shutil.rmtree(self._staging, ignore_errors=True)
            return
        fs, path = filesystem(self._staging)
        for rel in self._entries:
            try:
                fs.rm(posixpath.join(path, rel))
            except FileNotFoundError:
                pass

    def __enter__(self) -> ArtifactWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def require_complete(uri: str, *, verify: bool = False) -> dict[str, Any]:
    """The completion manifest of the artifact at ``uri``; with ``verify`` every checksum is checked."""
    marker = join(uri, COMPLETE_MARKER)
    if not exists(marker):
        if not exists(uri):
            raise StorageError(f"{uri}: not found")
        raise StorageError(f"{uri}: incomplete artifact (no {COMPLETE_MARKER}); the step that wrote it did not finish")
    manifest: dict[str, Any] = read_json(marker)
    if verify:
        for rel, entry in manifest["files"].items():
            actual = sha256_of(join(uri, rel))
            if actual != entry["sha256"]:
                raise StorageError(f"{join(uri, rel)}: checksum mismatch (expected {entry['sha256']}, got {actual})")
    return manifest


def local_path(uri: str) -> Path:
    """The local path of a local URI (for libraries that only take paths)."""
    scheme, path = _split(uri)
    if scheme != "file":
        raise StorageError(f"{uri}: not a local path")
    return Path(path)

"""Reading a complete artifact: one version, only the files its marker lists, each checked against it.

:class:`ArtifactReader` resolves the marker once: a path it does not list is refused (a ``dataset.json`` cannot point
outside the artifact), each read is checked against the listed size and the first one against the SHA-256. A
mismatch is an error naming the file, unless the same version moved from staging to the plain paths (followed); a
new version re-published meanwhile is an error, so a reader never mixes two.
"""

from __future__ import annotations

import errno
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from kftrain.storage.errors import StorageError, errors, storage_error, with_retry
from kftrain.storage.io import FileDigest, digest_of, exists, read_bytes
from kftrain.storage.marker import COMPLETE_MARKER, Manifest, parse
from kftrain.storage.paths import confine, local_target
from kftrain.storage.publish import sibling
from kftrain.storage.uri import filesystem, is_local, join, local_path

T = TypeVar("T")


def _missing(uri: str) -> StorageError:
    if not exists(uri):
        fs, _ = filesystem(uri)
        return storage_error(uri, FileNotFoundError(errno.ENOENT, "not found", uri), fs)
    return StorageError(f"{uri}: incomplete artifact (no {COMPLETE_MARKER}); the step that wrote it did not finish")


class ArtifactReader:
    """The complete artifact at ``uri``, pinned to the version its marker names when this is made."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/") if "://" in uri else uri
        self._resolve()
        self._checked: set[str] = set()

    def _resolve(self) -> None:
        marker = join(self.uri, COMPLETE_MARKER)
        try:
            data = read_bytes(marker)
        except StorageError:
            if exists(marker):
                raise
            raise _missing(self.uri) from None
        self.manifest: Manifest = parse(data, self.uri)
        self.root = sibling(self.uri, self.manifest.staged) if self.manifest.staged else self.uri

    @property
    def files(self) -> dict[str, FileDigest]:
        return self.manifest.files

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.metadata

    def uri_of(self, rel: str) -> str:
        """Where ``rel`` of this version is read from; it must be a file the marker lists."""
        confine(rel, self.uri)
        if rel not in self.manifest.files:
            raise StorageError(
                f"{self.uri}: {rel!r} is not a file of this artifact (its {COMPLETE_MARKER} does not list it)"
            )
        if is_local(self.root):
            return local_target(str(local_path(self.root)), rel)  # nor leave it through a symbolic link
        return join(self.root, *rel.split("/"))

    def read_bytes(self, rel: str) -> bytes:
        """The content of ``rel``, checked against the marker (the SHA-256 on its first read)."""

        def load(target: str) -> tuple[bytes, int, str | None]:
            data = read_bytes(target)
            return data, len(data), None if rel in self._checked else _sha256(data)

        return self._checked_load(rel, load)

    def checked_uri(self, rel: str) -> str:
        """Where ``rel`` of this version is, its size and SHA-256 checked against the marker by one streamed
        read: for a reader that then opens the file itself (Arrow reading a local Parquet file)."""
        if rel in self._checked:
            return self.uri_of(rel)

        def load(target: str) -> tuple[str, int, str | None]:
            got = digest_of(target)
            return target, got.size, got.sha256

        return self._checked_load(rel, load)

    def _checked_load(self, rel: str, load: Callable[[str], tuple[T, int, str | None]]) -> T:
        """``load(target)`` of ``rel``'s URI, its size and SHA-256 (None: not checked) matched against the marker;
        tried a second time when the version moved (was promoted) meanwhile."""
        for attempt in (1, 2):
            target = self.uri_of(rel)
            expected = self.manifest.files[rel]
            try:
                value, size, sha256 = load(target)
            except StorageError as exc:
                if attempt == 1 and self._moved_since():
                    continue  # the same version, now read from where the promotion put it
                raise exc from None
            problem = _mismatch(expected, size, sha256)
            if problem is None:
                self._checked.add(rel)
                return value
            if attempt == 1 and self._moved_since():
                continue
            raise StorageError(f"{target}: {problem}")
        raise AssertionError("unreachable: the second attempt returns or raises")

    def read_json(self, rel: str) -> Any:
        try:
            return json.loads(self.read_bytes(rel))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StorageError(f"{self.uri_of(rel)}: not valid JSON ({exc})") from None

    def check_sizes(self, *, follow: bool = True) -> None:
        """Every listed file is there with its listed size (one listing, no reads)."""
        sizes = _sizes(self.root)
        for rel, digest in sorted(self.manifest.files.items()):
            got = sizes.get(rel)
            if got != digest.size:
                if follow and self._moved_since():
                    self.check_sizes(follow=False)
                    return
                target = join(self.root, *rel.split("/"))
                what = (
                    f"listed in its {COMPLETE_MARKER} but missing"
                    if got is None
                    else f"checksum mismatch ({got} bytes where its {COMPLETE_MARKER} lists {digest.size})"
                )
                raise StorageError(f"{target}: {what}; the artifact was changed after it was published")

    def verify(self) -> None:
        """Every listed file is there with its listed size and SHA-256."""
        self.check_sizes()
        for rel, expected in sorted(self.manifest.files.items()):
            target = self.uri_of(rel)
            got = digest_of(target)
            problem = _mismatch(expected, got.size, got.sha256)
            if problem is not None:
                raise StorageError(f"{target}: {problem}")
            self._checked.add(rel)

    def local_root(self) -> str:
        """The local folder holding this version (local artifacts only)."""
        return str(local_path(self.root))

    def _moved_since(self) -> bool:
        """Re-read the marker: True when it names the same version in another place (follow it); an error
        when it names another version; False when nothing changed (the file itself is wrong)."""
        before_files, before_root = self.manifest.files, self.root
        try:
            self._resolve()
        except StorageError:
            return False
        if self.manifest.files != before_files:
            raise StorageError(
                f"{self.uri}: re-published while being read (its {COMPLETE_MARKER} changed); read it again"
            )
        return self.root != before_root


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mismatch(expected: FileDigest, size: int, sha256: str | None) -> str | None:
    if size != expected.size:
        return (
            f"checksum mismatch ({size} bytes where its {COMPLETE_MARKER} lists {expected.size}): the file was "
            "changed after it was published"
        )
    if sha256 is not None and sha256 != expected.sha256:
        return (
            f"checksum mismatch (expected sha256 {expected.sha256}, got {sha256}): the file was changed after it "
            "was published"
        )
    return None


def _sizes(root: str) -> dict[str, int]:
    """Size of every file under ``root`` by relative path, from one listing."""
    fs, path = filesystem(root)
    base = path.rstrip("/")
    with errors(root, fs):
        found = with_retry(f"list {root}", lambda: fs.find(base, detail=True))
    sizes: dict[str, int] = {}
    for full, info in found.items():
        rel = full[len(base) + 1 :] if full.startswith(base + "/") else None
        if rel:
            sizes[rel] = int(info.get("size") or 0)
    return sizes

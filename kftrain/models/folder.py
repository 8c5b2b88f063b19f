"""Reading a model folder: through its completion marker when it has one, else as the plain folder a program wrote.

A folder written through kftrain is read through :class:`~kftrain.storage.ArtifactReader` (only the files its marker
lists, each checked against its size and SHA-256); one a user's program wrote has no marker, and its files are those a
listing finds. Every relative path (listed, or ``model.json``'s ``file``) goes through
:func:`~kftrain.storage.confine` first: nothing leads a reader outside the folder. Standard library only (plus storage).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kftrain import storage
from kftrain.storage.paths import local_target
from kftrain.storage.uri import is_local


class ModelFolder:
    """The files of the model folder at ``uri``, pinned to one version when it has a marker."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        marked = storage.exists(storage.join(uri, storage.COMPLETE_MARKER))
        self.reader = storage.ArtifactReader(uri) if marked else None

    def files(self) -> list[str]:
        """Relative ``/``-separated paths of the model's files (the marker's list, else a listing)."""
        if self.reader is not None:
            return sorted(self.reader.files)
        return storage.list_files(self.uri)  # each path confined by the listing

    def uri_of(self, rel: str) -> str:
        """Where ``rel`` is read from; a path that would leave the folder is refused, naming it."""
        if self.reader is not None:
            return self.reader.uri_of(rel)
        if is_local(self.uri):  # nor out of it through a symbolic link
            return local_target(str(storage.local_path(self.uri)), storage.confine(rel, self.uri))
        return storage.join(self.uri, *storage.confine(rel, self.uri).split("/"))

    def read_bytes(self, rel: str) -> bytes:
        """The content of the file ``rel`` (checked against the marker when there is one)."""
        if self.reader is not None:
            return self.reader.read_bytes(rel)
        return storage.read_bytes(self.uri_of(rel))

    def head(self, rel: str, size: int) -> bytes:
        """The first ``size`` bytes of ``rel`` (to tell a file's kind without reading it all)."""
        with storage.open_uri(self.uri_of(rel), "rb") as handle:
            data: bytes = handle.read(size)
        return data

    @contextmanager
    def local_copy(self, rel: str = "") -> Iterator[Path]:
        """A local path of the file or folder ``rel`` ("" for the whole model folder): in place when the model
        is local (its files checked against the marker first), else in a temporary download of the folder
        (a marked folder's listed files only, each checked as it is copied)."""
        if rel:
            storage.confine(rel, self.uri)
        if is_local(self.uri):
            if self.reader is not None:
                self.reader.verify()
                root = self.reader.local_root()
            else:
                root = str(storage.local_path(self.uri))
            yield Path(local_target(root, rel)) if rel else Path(root)  # not out through a symbolic link
            return
        tmp = tempfile.mkdtemp(prefix="kftrain-model-")
        try:
            target = Path(tmp) / "model"
            storage.download(self.uri, target)
            yield target.joinpath(*rel.split("/")) if rel else target
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

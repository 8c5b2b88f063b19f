"""The completion marker, ``_COMPLETE.json``: its format is known only to this module.

It lists every file with its size and SHA-256, and the metadata:
``{"files": {"model/weights.bin": {"sha256": "…", "size": 1234}}, "metadata": {…}}``. During an object-store
promotion it also names the staged version (``"staged"``) and the replaced files being removed (``"superseded"``).
:func:`parse` checks all of it: a marker whose paths leave the artifact, or not written by kftrain, is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from kftrain.storage.errors import StorageError
from kftrain.storage.io import FileDigest
from kftrain.storage.paths import confine

COMPLETE_MARKER = "_COMPLETE.json"
STAGING_INFIX = ".partial-"  # a staging folder or prefix is "<final name>.partial-<hex id>"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_STAGING_ID = re.compile(r"[0-9a-f]{8,32}")


def staging_name(final_name: str, staging_id: str) -> str:
    return f"{final_name}{STAGING_INFIX}{staging_id}"


@dataclass(frozen=True)
class Manifest:
    """What a marker says: every file's size and SHA-256, the metadata, and where a promotion stands."""

    files: dict[str, FileDigest]
    metadata: dict[str, Any] = field(default_factory=dict)
    staged: str | None = None  # the sibling prefix holding this version while it is promoted
    superseded: tuple[str, ...] = ()  # files of the replaced version, being removed from the plain paths

    def to_bytes(self) -> bytes:
        """Indented, keys sorted: stable bytes, so equal manifests have equal checksums."""
        doc: dict[str, Any] = {
            "files": {rel: digest.as_dict() for rel, digest in sorted(self.files.items())},
            "metadata": self.metadata,
        }
        if self.staged is not None:
            doc["staged"] = self.staged
            doc["superseded"] = sorted(self.superseded)
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    def public(self) -> dict[str, Any]:
        """The manifest as callers of :func:`kftrain.storage.require_complete` get it."""
        return {"files": {rel: d.as_dict() for rel, d in sorted(self.files.items())}, "metadata": self.metadata}


def parse(data: bytes, artifact_uri: str) -> Manifest:
    """The manifest in the marker bytes ``data`` of the artifact at ``artifact_uri``; every field checked."""
    where = f"{artifact_uri.rstrip('/')}/{COMPLETE_MARKER}"
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(f"{where}: not a completion marker kftrain wrote (not JSON: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        raise StorageError(f"{where}: not a completion marker kftrain wrote (no 'files' mapping)")
    files: dict[str, FileDigest] = {}
    for rel, entry in doc["files"].items():
        confine(rel, where)
        if rel == COMPLETE_MARKER:
            raise StorageError(f"{where}: lists itself as a file of the artifact")
        size = entry.get("size") if isinstance(entry, dict) else None
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or not (isinstance(sha, str) and _SHA256.fullmatch(sha))
        ):
            raise StorageError(f"{where}: the entry of {rel!r} needs a size (bytes) and a sha256 (64 hex digits)")
        files[rel] = FileDigest(size, sha)
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict):
        raise StorageError(f"{where}: 'metadata' must be a mapping")
    staged = doc.get("staged")
    final_name = artifact_uri.rstrip("/").rsplit("/", 1)[-1]
    if staged is not None and not (
        isinstance(staged, str)
        and staged.startswith(final_name + STAGING_INFIX)
        and _STAGING_ID.fullmatch(staged[len(final_name + STAGING_INFIX) :])
    ):
        raise StorageError(f"{where}: 'staged' must name a sibling {final_name}{STAGING_INFIX}<id>, got {staged!r}")
    superseded = doc.get("superseded", [])
    if not isinstance(superseded, list):
        raise StorageError(f"{where}: 'superseded' must be a list of paths")
    return Manifest(files, metadata, staged, tuple(confine(rel, where) for rel in superseded))

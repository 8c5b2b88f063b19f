"""Artifacts for the storage tests: published, tampered with, and compared file by file before and after."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from kftrain import storage
from testbed.s3_server import MotoServer, boto3_client


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (and beside it) by path, with the SHA-256 of its content."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def publish_local(out: Path, files: dict[str, bytes], metadata: dict | None = None) -> None:
    with storage.ArtifactWriter(str(out), metadata=metadata or {}) as writer:
        for rel, data in files.items():
            writer.write_bytes(rel, data)


def rewrite_marker(artifact: Path, edit: Callable[[dict], None]) -> None:
    marker = artifact / storage.COMPLETE_MARKER
    doc = json.loads(marker.read_text())
    edit(doc)
    marker.write_text(json.dumps(doc))


def put_object(s3_env: str, moto: MotoServer, key: str, body: bytes) -> None:
    """Put ``body`` at ``key`` of the bucket of ``s3_env`` straight through boto3 (not through kftrain)."""
    boto3_client(moto.endpoint).put_object(Bucket=s3_env.removeprefix("s3://"), Key=key, Body=body)

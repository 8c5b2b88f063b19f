"""The run's bucket as KFP's launcher uses it: downloads and uploads by key, with the bytes moved counted.

This is the harness's own S3 client (boto3 with the endpoint and keys the harness configured), not kftrain's
storage: the steps must find the store by themselves, the way KFP's launcher does.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Bucket:
    """``scheme://bucket/prefix`` (the pipeline root) on an S3 endpoint."""

    root: str  # the pipeline root URI, e.g. minio://mlpipeline/v2/artifacts
    endpoint: str
    key: str
    secret: str

    def __post_init__(self) -> None:
        import boto3  # here, not at the top: collecting the tests that import this module need not load it

        self.client: Any = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
        )
        self.name = self.root.split("://", 1)[1].partition("/")[0]

    def create(self) -> None:
        self.client.create_bucket(Bucket=self.name)

    def key_of(self, uri: str) -> tuple[str, str]:
        bucket, _, key = uri.split("://", 1)[1].partition("/")
        return bucket, key

    def download_prefix(self, uri: str, local: Path, *, siblings_too: bool) -> int:
        """Every object listed under the raw prefix of ``uri`` (DownloadBlob), written relative to ``local``."""
        bucket, key = self.key_of(uri)
        moved = 0
        for obj in self.objects(bucket, key):
            under = obj["Key"] == key or obj["Key"].startswith(key.rstrip("/") + "/")
            if not (under or siblings_too):
                continue
            relative = Path(obj["Key"]).relative_to(Path(key).parent)
            target = local.parent / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(bucket, obj["Key"], str(target))
            moved += int(obj["Size"])
        return moved

    def objects(self, bucket: str, prefix: str) -> list[dict[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]

    def upload(self, source: Path, uri: str) -> int:
        """UploadBlob: a file to the key, a folder's files under it."""
        bucket, key = self.key_of(uri)
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for path in files:  # a folder's files joined as filepath.Join does (object_store.go@2.5.0:104-117)
            target = key if path == source else posixpath.join(key, path.relative_to(source).as_posix())
            self.client.upload_file(str(path), bucket, target)
        return sum(p.stat().st_size for p in files)


# Which keys a bucket configuration owns (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/config.go;
# @2.17.0 the same functions): ParseBucketPathToConfig (103-137) splits a root into scheme, bucket and prefix (the
# query string apart); PrefixedBucket (82-84) is the scheme and ``path.Join(bucket, prefix)``; KeyFromURI (86-97)
# takes a URI that starts with it, as text, and refuses one that does not or leaves an empty key.
_BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")


def prefixed_bucket(root: str) -> str:
    """PrefixedBucket of the configuration parsed from ``root`` (a pipeline root, or a run's folder)."""
    match = _BUCKET_PATTERN.match(root)
    if match is None:
        raise ValueError(f"parse bucket config failed: unrecognized pipeline root format: {root!r}")
    scheme, bucket, prefix = match.group(1), match.group(2), (match.group(3) or "").lstrip("/")
    return scheme + posixpath.normpath(posixpath.join(bucket, prefix))


def key_from_uri(prefixed: str, uri: str) -> str:
    """KeyFromURI: ``uri``'s key under ``prefixed`` (a :func:`prefixed_bucket`); ValueError when it has none."""
    if not uri.startswith(prefixed):
        raise ValueError(f"URI {uri!r} does not have expected bucket prefix {prefixed!r}")
    key = uri[len(prefixed) :].lstrip("/")
    if not key:
        raise ValueError(f"URI {uri!r} has empty key given prefixed bucket {prefixed!r}")
    return key

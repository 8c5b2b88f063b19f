"""The run's bucket as KFP's launcher uses it: downloads and uploads by key, with the bytes moved counted.

This is the harness's own S3 client (boto3 with the endpoint and keys the harness configured), not kftrain's
storage: the steps must find the store by themselves, the way KFP's launcher does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3


@dataclass
class Bucket:
    """``scheme://bucket/prefix`` (the pipeline root) on an S3 endpoint."""

    root: str  # the pipeline root URI, e.g. minio://mlpipeline/v2/artifacts
    endpoint: str
    key: str
    secret: str

    def __post_init__(self) -> None:
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
        )
        scheme, rest = self.root.split("://", 1)
        self.scheme = scheme + "://"
        self.name, _, prefix = rest.partition("/")
        self.prefix = prefix.strip("/")

    @property
    def prefixed_bucket(self) -> str:
        return f"{self.scheme}{self.name}/{self.prefix}".rstrip("/")

    def create(self) -> None:
        self.client.create_bucket(Bucket=self.name)

    def owns(self, uri: str) -> bool:
        """KeyFromURI: the URI lies under the pipeline root's bucket and prefix."""
        return uri.startswith(self.prefixed_bucket) and len(uri) > len(self.prefixed_bucket)

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
        for path in files:
            target = key if path == source else f"{key}/{path.relative_to(source).as_posix()}"
            self.client.upload_file(str(path), bucket, target)
        return sum(p.stat().st_size for p in files)

"""Concurrent object-store transfers: multipart uploads with several parts in flight, ranged reads ahead.

s3fs uploads one part, and a read loop fetches one range, at a time: on a fast store the client waits on round trips.
Here chunks are still produced and consumed in order (hashing, progress and :mod:`kftrain.storage.io`'s retries see
the same sequence) while up to ``concurrency`` requests run on s3fs's event loop, holding at most that many parts.
Every request goes through ``S3FileSystem._call_s3``, so s3fs's and botocore's retries and credentials apply. A
request with a body has a deadline (:func:`upload_deadline_s`): aiohttp arms its read timeout only once the body is
sent, so a server that never reads held an upload forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
from collections import deque
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import suppress
from typing import Any

from fsspec.asyn import AsyncFileSystem

from kftrain.storage import uri

# Requests in flight per transfer. Measured against a local S3 server (bench/bench_storage.py, 256 MiB):
# 4 was as fast as 8 and peaked ~60 MB lower (93 vs 154 MB over baseline). boto3 uses 10 threads; raise it
# through the environment for high-latency links.
DEFAULT_CONCURRENCY = 4
CONCURRENCY_ENV = "KFTRAIN_S3_MAX_CONCURRENCY"


def concurrency() -> int:
    """Requests in flight per transfer: ``KFTRAIN_S3_MAX_CONCURRENCY`` or :data:`DEFAULT_CONCURRENCY`."""
    raw = os.environ.get(CONCURRENCY_ENV, "").strip()
    if not raw:
        return DEFAULT_CONCURRENCY
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{CONCURRENCY_ENV}={raw!r}: expected a whole number ≥ 1") from None
    if value < 1:
        raise ValueError(f"{CONCURRENCY_ENV}={raw!r}: expected a whole number ≥ 1")
    return value


def _submit(fs: Any, request: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    """Start one request (a coroutine of ``fs``) on fsspec's event loop; the caller waits on the future."""
    return asyncio.run_coroutine_threadsafe(request, fs.loop)


# The slowest upload a deadline allows for: 256 KiB/s (an 8 MiB part: 32 s, besides the timeouts).
MIN_UPLOAD_BYTES_PER_S = 256 * 1024


def upload_deadline_s(size: int) -> float:
    """How long a request sending ``size`` bytes may take, botocore's own tries included: the connect and read
    timeouts (:mod:`kftrain.storage.uri`) plus the body at :data:`MIN_UPLOAD_BYTES_PER_S`."""
    return uri.CONNECT_TIMEOUT_S + uri.READ_TIMEOUT_S + size / MIN_UPLOAD_BYTES_PER_S


async def _within(request: Coroutine[Any, Any, Any], seconds: float, what: str) -> Any:
    try:
        return await asyncio.wait_for(request, seconds)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what}: the server did not take it in {seconds:.0f}s") from None


def _send(fs: Any, method: str, body: bytes, **kwargs: Any) -> concurrent.futures.Future[Any]:
    """Start a request that sends ``body``, cancelled (a TimeoutError) past its :func:`upload_deadline_s`."""
    what = f"{method} {kwargs.get('Bucket')}/{kwargs.get('Key')}"
    return _submit(fs, _within(fs._call_s3(method, Body=body, **kwargs), upload_deadline_s(len(body)), what))


def _cancel(futures: list[concurrent.futures.Future[Any]]) -> None:
    for future in futures:
        future.cancel()
    for future in futures:
        with suppress(BaseException):  # we are already failing; wait only so no request outlives us
            future.result(timeout=30)


MAX_PARTS = 10_000  # S3's limit per multipart upload
GROW_EVERY = 2_000  # parts per part size: the size doubles after each such run, so 10,000 parts hold
# 2,000 × (1 + 2 + 4 + 8 + 16) = 62,000 base parts (≈ 484 GiB at 8 MiB) while small objects keep small parts


def regroup_into_parts(chunks: Iterable[bytes], part_size: int, grow_every: int = GROW_EVERY) -> Iterator[bytes]:
    """Regroup ``chunks`` into parts of at least the current part size (the last one may be smaller).

    The part size is ``part_size`` for the first ``grow_every`` parts and doubles after every further
    ``grow_every``, so a stream of unknown length fits in S3's 10,000 parts.
    """
    pending: list[bytes] = []
    pending_size = 0
    number = 1
    for chunk in chunks:
        if not chunk:
            continue
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= part_size << ((number - 1) // grow_every):
            yield pending[0] if len(pending) == 1 else b"".join(pending)
            pending, pending_size = [], 0
            number += 1
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


class MultipartUpload:
    """Upload a stream of chunks to ``bucket/key``: one PUT if it fits in a part, else a multipart upload.

    The object appears only when :meth:`run` returns (CompleteMultipartUpload); on a failure the parts in
    flight are cancelled and :meth:`run` raises, leaving the caller to :meth:`abort` the upload (it may
    skip that when the server is unreachable), so readers never see a partial object.
    """

    def __init__(self, fs: Any, path: str, *, part_size: int, max_concurrency: int | None = None) -> None:
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)
        self.part_size = part_size
        self.max_concurrency = max_concurrency or concurrency()
        self.upload_id: str | None = None
        self.checksum_field: str | None = None

    def run(self, chunks: Iterable[bytes]) -> None:
        parts = regroup_into_parts(chunks, self.part_size)
        first = next(parts, b"")
        second = next(parts, None)
        if second is None:  # everything fits in one part: a plain PUT, as s3fs does for small files
            _send(self.fs, "put_object", first, Bucket=self.bucket, Key=self.key).result()
            return
        algorithm = _checksum_algorithm(self.fs)
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        created = self.fs.call_s3("create_multipart_upload", Bucket=self.bucket, Key=self.key, **extra)
        self.upload_id = created["UploadId"]
        self.checksum_field = f"Checksum{algorithm}" if algorithm else None
        in_flight: deque[tuple[int, concurrent.futures.Future[Any]]] = deque()
        done: list[dict[str, Any]] = []
        try:
            for number, body in enumerate(itertools.chain((first, second), parts), start=1):
                if number > MAX_PARTS:
                    raise ValueError(
                        f"{self.bucket}/{self.key}: more than {MAX_PARTS} parts; the stream is larger than one "
                        "S3 object can be built from (about 484 GiB at the default part size)"
                    )
                if len(in_flight) >= self.max_concurrency:
                    done.append(self._finish(*in_flight.popleft()))
                in_flight.append((number, self._upload_part(number, body)))
            while in_flight:
                done.append(self._finish(*in_flight.popleft()))
            self.fs.call_s3(
                "complete_multipart_upload",
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": done},
            )
        except BaseException:
            _cancel([future for _, future in in_flight])
            raise

    def abort(self) -> None:
        """Abort the multipart upload, if one was started (best effort: the caller is already failing)."""
        if self.upload_id is not None:
            with suppress(Exception):
                self.fs.call_s3("abort_multipart_upload", Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)

    def _upload_part(self, number: int, body: bytes) -> concurrent.futures.Future[Any]:
        return _send(
            self.fs, "upload_part", body, Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number
        )

    def _finish(self, number: int, future: concurrent.futures.Future[Any]) -> dict[str, Any]:
        response = future.result()
        part = {"PartNumber": number, "ETag": response["ETag"]}
        if self.checksum_field and response.get(self.checksum_field):
            part[self.checksum_field] = response[self.checksum_field]
        return part


def _checksum_algorithm(fs: Any) -> str | None:
    """``CRC32`` when the client adds checksums by default (botocore's ``when_supported``), else None.

    boto3's upload_file declares the algorithm on CreateMultipartUpload in that case and lists each part's
    checksum on completion; we do the same, so the store keeps a checksum of the whole object and
    verifies the parts it assembles (and does the same server-side work it does for boto3).
    """
    config = getattr(getattr(fs.s3, "meta", None), "config", None)
    setting = getattr(config, "request_checksum_calculation", None) or "when_supported"
    return "CRC32" if setting == "when_supported" else None


Prefetched = tuple[tuple[int, int], "concurrent.futures.Future[bytes]"]


def ranged_reads(
    fs: Any, path: str, ranges: Iterable[tuple[int, int]], *, max_concurrency: int | None = None
) -> Iterator[Prefetched]:
    """Start ranged reads of ``path`` ahead of the consumer, yielding ``(range, future)`` in order.

    At most ``max_concurrency`` reads are in flight or waiting to be consumed. A consumer that stops early
    (an error, a closed generator) cancels the rest.
    """
    if not isinstance(fs, AsyncFileSystem):  # a synchronous filesystem: read each range when it is reached
        for start, end in ranges:
            future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
            try:
                future.set_result(fs.cat_file(path, start=start, end=end))
            except Exception as exc:
                future.set_exception(exc)
            yield (start, end), future
        return
    window = max_concurrency or concurrency()
    pending: deque[Prefetched] = deque()
    upcoming = iter(ranges)
    try:
        while True:
            while len(pending) < window:
                span = next(upcoming, None)
                if span is None:
                    break
                start, end = span
                # _cat_file does the GET with s3fs's retries on a dropped body, and returns the bytes.
                future = _submit(fs, fs._cat_file(path, start=start, end=end))
                pending.append((span, future))
            if not pending:
                return
            yield pending.popleft()
    finally:
        _cancel([future for _, future in pending])

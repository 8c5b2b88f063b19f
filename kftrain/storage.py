"""Read and write artifacts by URI: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

fsspec does the I/O (s3fs for ``s3://``/``minio://``, gcsfs for ``gs://``); there is no S3 client of our own.
``minio://bucket/key`` (what KFP's default pipeline root uses) is S3 with the endpoint taken from the
environment: ``MINIO_ENDPOINT``, ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, or KFP's in-cluster service
variables ``MINIO_SERVICE_SERVICE_HOST``/``MINIO_SERVICE_SERVICE_PORT``. Credentials never travel as
arguments: they come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, else from
a mounted secret folder named by ``KFTRAIN_S3_CREDENTIALS_DIR`` (files ``accesskey``/``secretkey``, the
layout of KFP's ``mlpipeline-minio-artifact`` secret), else from botocore's own environment-driven chain
(web identity / pod identity).

Outputs are published atomically: :class:`ArtifactWriter` writes the files, then a completion
marker (``_COMPLETE.json``) listing each file with its size and SHA-256. Readers call
:func:`require_complete`, so a writer that died half-way leaves nothing that looks complete.

Bulk transfers (:func:`copy`, :func:`upload`, :func:`download`) stream in :data:`CHUNK`-sized pieces, so
memory stays flat whatever the size, and hash while they stream. To and from S3 several parts or ranges
are in flight at once (:mod:`kftrain.s3_transfer`, ``KFTRAIN_S3_MAX_CONCURRENCY``), while the chunks still
pass through hashing and progress callbacks in order. Transient object-store faults are
retried with bounded backoff: every ranged read is retried on its own; a write whose part upload still
fails after s3fs's/botocore's per-request retries is restarted from the source (the half-written object
is never visible: S3 multipart uploads only appear on completion, local files are renamed into place).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeVar

import fsspec

from kftrain import s3_transfer
from kftrain.errors import KftrainError
from kftrain.retry import RetryPolicy, call_with_retry, exception_chain

COMPLETE_MARKER = "_COMPLETE.json"
CHUNK = 8 * 1024 * 1024  # the read size, the upload part size and the memory bound per stream
_MIN_PART = 5 * 1024 * 1024  # S3 (and s3fs) refuse smaller multipart parts


def _part_size() -> int:
    return max(CHUNK, _MIN_PART)  # read CHUNK at call time: tests shrink it


# Our retry layer sits above botocore's (per request) and s3fs's (SlowDown, dropped connections); it covers
# what those give up on, e.g. a server that is down for a few seconds while it restarts. Bounded: at most
# 6 tries per chunk or object, waiting 0.25 s * 2**n (capped at 5 s, jittered) between them.
RETRY_POLICY = RetryPolicy(attempts=6, initial_s=0.25, max_s=5.0, jitter=True)


def _botocore_config() -> dict[str, Any]:
    """botocore's own per-request retries: "standard" mode retries 500/503/SlowDown and connection errors.

    The standard AWS_MAX_ATTEMPTS/AWS_RETRY_MODE variables still apply (an explicit Config would otherwise
    override them), so operators and tests can tune the inner layer without code changes.
    """
    return {
        "retries": {
            "max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS") or 3),
            "mode": os.environ.get("AWS_RETRY_MODE") or "standard",
        },
        "connect_timeout": 10,
        "read_timeout": 120,
    }


# S3 error codes that mean "try again", as opposed to NoSuchKey/AccessDenied which never get better.
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "500",
        "502",
        "503",
        "504",
        # The server forgot an in-progress multipart upload (restarted without persisting it): the
        # object-level retry starts a new upload from the source.
        "NoSuchUpload",
    }
)

T = TypeVar("T")
Progress = Callable[[int], None]  # called with the byte count of every chunk moved


class StorageError(KftrainError):
    """A URI that cannot be read or written, named in the message."""


@dataclass(frozen=True)
class FileDigest:
    """Size and SHA-256 of one file, as recorded in the completion marker."""

    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256}


# --------------------------------------------------------------------------------------------------
# URIs and filesystems


def _split(uri: str) -> tuple[str, str]:
    if "://" not in uri:
        return "file", os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme in ("file", "local"):
        return "file", rest
    if scheme in ("minio", "s3a"):
        return "s3", rest
    return scheme, rest


def _is_local(uri: str) -> bool:
    return _split(uri)[0] == "file"


def _with_scheme(endpoint: str) -> str:
    # In-cluster MinIO (KFP's default) is plain HTTP; endpoints from env often come without a scheme.
    return endpoint if "://" in endpoint else "http://" + endpoint


def s3_endpoint(uri: str) -> str | None:
    """The S3 endpoint URL that ``uri`` resolves to, or None for AWS's default.

    ``s3://`` honours ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL`` and ``MINIO_ENDPOINT``; ``minio://``
    prefers ``MINIO_ENDPOINT`` and falls back to KFP's service variables, and has no AWS default.
    """
    env = os.environ
    scheme = uri.split("://", 1)[0] if "://" in uri else "file"
    if scheme == "minio":
        candidates = [env.get("MINIO_ENDPOINT"), env.get("AWS_ENDPOINT_URL_S3"), env.get("AWS_ENDPOINT_URL")]
        host = env.get("MINIO_SERVICE_SERVICE_HOST")
        if host:
            candidates.append(f"{host}:{env.get('MINIO_SERVICE_SERVICE_PORT') or '9000'}")
        for candidate in candidates:
            if candidate:
                return _with_scheme(candidate)
        raise StorageError(
            f"{uri}: no MinIO endpoint; set MINIO_ENDPOINT (or AWS_ENDPOINT_URL, or "
            "MINIO_SERVICE_SERVICE_HOST/MINIO_SERVICE_SERVICE_PORT as KFP does in-cluster)"
        )
    for candidate in (env.get("AWS_ENDPOINT_URL_S3"), env.get("AWS_ENDPOINT_URL"), env.get("MINIO_ENDPOINT")):
        if candidate:
            return _with_scheme(candidate)
    return None


def _s3_credentials(uri: str) -> dict[str, str]:
    """key/secret/token for s3fs, from the environment or a mounted secret; empty means botocore's chain."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        creds = {"key": env["AWS_ACCESS_KEY_ID"], "secret": env["AWS_SECRET_ACCESS_KEY"]}
        if env.get("AWS_SESSION_TOKEN"):
            creds["token"] = env["AWS_SESSION_TOKEN"]
        return creds
    secret_dir = env.get("KFTRAIN_S3_CREDENTIALS_DIR")
    if secret_dir:
        files = {"key": "accesskey", "secret": "secretkey", "token": "sessiontoken"}
        creds = {}
        for option, name in files.items():
            path = os.path.join(secret_dir, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    creds[option] = handle.read().strip()  # secrets mounted from YAML often end in a newline
        if "key" not in creds or "secret" not in creds:
            raise StorageError(
                f"{uri}: KFTRAIN_S3_CREDENTIALS_DIR={secret_dir} must contain the files accesskey and secretkey"
            )
        return creds
    return {}


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and in-filesystem path for ``uri``."""
    scheme, path = _split(uri)
    options: dict[str, Any] = {}
    if scheme == "s3":
        endpoint = s3_endpoint(uri)
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
        options.update(_s3_credentials(uri))
        options["config_kwargs"] = _botocore_config()
        # Markers are written by other processes (other pods); a cached listing would hide them.
        options["use_listings_cache"] = False
    elif scheme == "gs":
        try:
            import gcsfs  # noqa: F401  # only to turn a missing package into a clear message
        except ImportError:
            raise StorageError(f"{uri}: gs:// needs the gcsfs package (pip install gcsfs)") from None
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


# --------------------------------------------------------------------------------------------------
# Errors and retries


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code (``NoSuchBucket``, ``SlowDown``, ``503``...) somewhere in ``exc``'s chain."""
    for current in exception_chain(exc):
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status:
                return str(status)
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may go away on a retry (throttling, a server error, a dropped connection)."""
    code = _error_code(exc)
    if code == "NoSuchUpload":
        return True  # s3fs reports it as FileNotFoundError, but a fresh upload can succeed
    if isinstance(exc, StorageError | FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if code is not None:
        return code in _TRANSIENT_CODES
    # No S3 code: a dropped/refused connection or a timeout (botocore, aiohttp and the OS all name these
    # differently; their common ground is the class name or OSError/TimeoutError).
    names = {cls.__name__ for cls in type(exc).__mro__}
    transient_names = {
        "ConnectionError",
        "EndpointConnectionError",
        "HTTPClientError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ClientPayloadError",
        "ClientOSError",
        "ServerDisconnectedError",
        "IncompleteRead",
        "ResponseParserError",
        "FSTimeoutError",
    }
    return bool(names & transient_names) or isinstance(exc, ConnectionError | TimeoutError)


def sleep(seconds: float) -> None:
    """The wait between retries. A seam: tests replace it (they restart the server while storage backs off)."""
    time.sleep(seconds)


def with_retry(what: str, operation: Callable[[], T]) -> T:
    """``operation()``, retried under :data:`RETRY_POLICY` while it fails with an :func:`is_transient` error."""
    return call_with_retry(operation, policy=RETRY_POLICY, is_transient=is_transient, what=what, sleep=sleep)


def _bucket_problem(fs: fsspec.AbstractFileSystem, path: str) -> str | None:
    """Why the bucket of ``path`` cannot be used (NoSuchBucket, AccessDenied, ...), or None if it can.

    HEAD requests (what ``info``/``open`` use) carry no error body, so a 404/403 alone cannot tell a
    missing bucket from a missing key, or a bad key id from a missing permission; a listing call can.
    """
    bucket = path.split("/", 1)[0]
    prefix = path.split("/", 1)[1] if "/" in path else ""
    try:
        fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except Exception as exc:
        return _error_code(exc) or type(exc).__name__
    return None


def _is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = getattr(fs, "protocol", None)
    return protocol is not None and "s3" in (protocol if isinstance(protocol, tuple | list) else (protocol,))


def _storage_error(uri: str, exc: BaseException, fs: fsspec.AbstractFileSystem | None = None) -> StorageError:
    """A StorageError naming ``uri`` and the cause (the S3 error code when there is one)."""
    if isinstance(exc, StorageError):
        return exc
    code = _error_code(exc)
    detail = str(exc) or type(exc).__name__
    if (
        fs is not None
        and _is_s3(fs)
        and isinstance(exc, FileNotFoundError | PermissionError)
        and code in (None, "404", "403")
    ):
        with suppress(Exception):
            _, path = _split(uri)
            code = _bucket_problem(fs, path) or ("NoSuchKey" if isinstance(exc, FileNotFoundError) else code)
    if code is None:
        if isinstance(exc, FileNotFoundError):
            return StorageError(f"{uri}: not found ({detail})")
        if isinstance(exc, PermissionError):
            return StorageError(f"{uri}: permission denied ({detail})")
        return StorageError(f"{uri}: {type(exc).__name__}: {detail}")
    hints = {
        "NoSuchBucket": "the bucket does not exist",
        "NoSuchKey": "no such object",
        "AccessDenied": "the credentials are not allowed to do this",
        "InvalidAccessKeyId": "the access key id is unknown to the server; check AWS_ACCESS_KEY_ID",
        "SignatureDoesNotMatch": "the secret key is wrong; check AWS_SECRET_ACCESS_KEY",
    }
    return StorageError(f"{uri}: {code}: {hints.get(code, detail)}")


@contextmanager
def _errors(uri: str, fs: fsspec.AbstractFileSystem | None = None) -> Iterator[None]:
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        raise _storage_error(uri, exc, fs) from exc


# --------------------------------------------------------------------------------------------------
# Small reads and writes


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    with _errors(uri, fs):
        return bool(with_retry(f"exists {uri}", lambda: fs.exists(path)))


@contextmanager
def open_uri(uri: str, mode: str = "rb") -> Iterator[IO[Any]]:
    """Open ``uri``. A write that raises is discarded (never committed half-way), unlike fsspec's default."""
    fs, path = filesystem(uri)
    if "w" in mode and _is_local(uri):
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with _errors(uri, fs):
        handle = fs.open(path, mode, block_size=_part_size()) if "b" in mode else fs.open(path, mode)
    try:
        yield handle
    except BaseException as exc:
        _discard(handle, exc)
        raise
    with _errors(uri, fs):
        handle.close()


def _unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the server could not be reached at all (refused, down)."""
    return any(
        isinstance(e, ConnectionRefusedError) or type(e).__name__ == "EndpointConnectionError"
        for e in exception_chain(exc)
    )


def _discard(handle: IO[Any], reason: BaseException | None = None) -> None:
    """Drop a half-written file: abort the multipart upload instead of completing it on close.

    When the server is unreachable the abort is skipped: it would only wait through another round of
    retries, and an unfinished multipart upload is invisible to readers (a lifecycle rule reaps it).
    """
    writable = getattr(handle, "writable", None)
    if callable(writable) and writable() and hasattr(handle, "discard"):
        if not _unreachable(reason):
            with suppress(Exception):  # best effort; the server may be the reason we are here
                handle.discard()
        with suppress(Exception):
            handle.buffer = None  # type: ignore[attr-defined]  # what discard() does, minus the request
        with suppress(Exception):
            handle.closed = True  # type: ignore[misc]  # AbstractBufferedFile: stop close() from committing
    with suppress(Exception):
        handle.close()


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with _errors(uri, fs):
        return bytes(with_retry(f"read {uri}", lambda: fs.cat_file(path)))


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def list_files(uri: str) -> list[str]:
    """Relative paths of every file under ``uri``, sorted."""
    fs, path = filesystem(uri)
    base = path.rstrip("/")
    with _errors(uri, fs):
        found = with_retry(f"list {uri}", lambda: fs.find(base))
    return sorted(posixpath.relpath(p, base) if fs.protocol != "file" else os.path.relpath(p, base) for p in found)


# --------------------------------------------------------------------------------------------------
# Streaming


def iter_chunks(uri: str, *, progress: Progress | None = None) -> Iterator[bytes]:
    """The bytes of ``uri`` in chunks of at most CHUNK; each remote chunk is a ranged read, retried alone."""
    fs, path = filesystem(uri)
    if _is_local(uri):
        with _errors(uri, fs), open(path, "rb") as handle:
            while chunk := handle.read(CHUNK):
                if progress:
                    progress(len(chunk))
                yield chunk
        return
    with _errors(uri, fs):
        size = int(with_retry(f"stat {uri}", lambda: fs.info(path)["size"]))
    spans = ((start, min(start + CHUNK, size)) for start in range(0, size, CHUNK))
    # Several ranges are fetched ahead (s3_transfer.ranged_reads); chunks still come out in order, and a
    # range whose prefetch failed is re-read on its own under the usual retry policy.
    for (start, end), prefetched in s3_transfer.ranged_reads(fs, path, spans):
        with _errors(uri, fs):
            chunk = with_retry(
                f"read {uri} [{start}:{end}]",
                _first_then(prefetched.result, partial(fs.cat_file, path, start=start, end=end)),
            )
        if len(chunk) != end - start:
            # A short ranged read means the object changed or shrank under us; do not stitch versions.
            raise StorageError(f"{uri}: expected {end - start} bytes at offset {start}, got {len(chunk)}")
        if progress:
            progress(len(chunk))
        yield chunk


def _first_then(first: Callable[[], T], again: Callable[[], T]) -> Callable[[], T]:
    """An operation for :func:`with_retry` whose first attempt is ``first`` and every retry ``again``."""
    calls = 0

    def attempt() -> T:
        nonlocal calls
        calls += 1
        return first() if calls == 1 else again()

    return attempt


class _HashedChunks:
    """Iterates ``chunks`` unchanged while counting and hashing them: every write path records the same way."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._digest = hashlib.sha256()
        self._size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._digest.update(chunk)
            self._size += len(chunk)
            yield chunk

    def file_digest(self) -> FileDigest:
        return FileDigest(self._size, self._digest.hexdigest())


def digest_of(uri: str) -> FileDigest:
    """Size and SHA-256 of the file at ``uri``, streamed."""
    hashed = _HashedChunks(iter_chunks(uri))
    for _ in hashed:
        pass
    return hashed.file_digest()


def sha256_of(uri: str) -> str:
    return digest_of(uri).sha256


def _write_once(chunks: Iterator[bytes], dst_uri: str) -> FileDigest:
    """One attempt at writing ``chunks`` to ``dst_uri``; nothing is visible at ``dst_uri`` unless it succeeds."""
    fs, path = filesystem(dst_uri)
    hashed = _HashedChunks(chunks)
    if _is_local(dst_uri):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        partial = f"{path}.partial-{uuid.uuid4().hex[:8]}"
        try:
            with open(partial, "wb") as out:
                for chunk in hashed:
                    out.write(chunk)
            os.replace(partial, path)  # readers see the old file or the whole new one
        except BaseException:
            with suppress(FileNotFoundError):
                os.remove(partial)
            raise
    elif _is_s3(fs):
        # A multipart upload with several parts in flight; it becomes an object only on completion.
        upload = s3_transfer.MultipartUpload(fs, path, part_size=_part_size())
        try:
            upload.run(hashed)
        except BaseException as exc:
            if not _unreachable(exc):  # else the abort would only wait through more retries; see _discard
                upload.abort()
            raise
    else:
        # Other object stores (gs://): fsspec's buffered writer, which commits only on a clean close.
        handle = fs.open(path, "wb", block_size=_part_size())
        try:
            for chunk in hashed:
                handle.write(chunk)
            handle.close()
        except BaseException as exc:
            _discard(handle, exc)
            raise
    return hashed.file_digest()


def copy_file(src_uri: str, dst_uri: str, progress: Progress | None = None) -> FileDigest:
    """Copy one file from ``src_uri`` to ``dst_uri``, streaming; its size and SHA-256 as copied."""
    # Reads are retried per chunk inside iter_chunks; a write that still fails is restarted from the
    # source, which is always re-readable here (a file or an object), so the result is byte-identical.
    with _errors(dst_uri, filesystem(dst_uri)[0]):
        return with_retry(
            f"copy {src_uri} -> {dst_uri}", lambda: _write_once(iter_chunks(src_uri, progress=progress), dst_uri)
        )


def _is_dir(uri: str) -> bool:
    fs, path = filesystem(uri)
    with _errors(uri, fs):
        return bool(with_retry(f"isdir {uri}", lambda: fs.isdir(path)))


def copy(src_uri: str, dst_uri: str, *, progress: Progress | None = None) -> dict[str, FileDigest]:
    """Copy a file or a folder from ``src_uri`` to ``dst_uri`` (any two schemes), streaming in chunks.

    Returns the size and SHA-256 of every file copied, keyed by its path relative to ``src_uri`` (``""``
    for a single file). A folder that is a complete artifact is checked against its marker while it
    streams, and its marker is copied last, so the copy is complete only once everything else is there.
    """
    if not _is_dir(src_uri):
        if not exists(src_uri):
            fs, _ = filesystem(src_uri)
            raise _storage_error(src_uri, FileNotFoundError(errno.ENOENT, "not found", src_uri), fs)
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


# --------------------------------------------------------------------------------------------------
# Atomic artifacts


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
        scheme, path = _split(self.uri)
        self._local = scheme == "file"
        if self._local:
            self._staging = f"{path.rstrip('/')}.partial-{uuid.uuid4().hex[:8]}"
            os.makedirs(self._staging, exist_ok=True)
        else:
            self._staging = self.uri.rstrip("/")
            marker = join(self._staging, COMPLETE_MARKER)
            if exists(marker):
                fs, p = filesystem(marker)
                with _errors(marker, fs):
                    fs.rm(p)  # re-publishing: the old output stops being complete first

    def path_for(self, relpath: str) -> str:
        """Where to write ``relpath``: a local path to hand to libraries that want one, or a URI."""
        return join(self._staging, relpath)

    @contextmanager
    def open(self, relpath: str, mode: str = "wb") -> Iterator[IO[Any]]:
        target = self.path_for(relpath)
        with open_uri(target, mode) as handle:
            hashing = _HashingWriter(handle)
            yield hashing  # type: ignore[misc]  # duck-typed IO: everything else is delegated
        if hashing.valid:
            self._entries[relpath] = FileDigest(hashing.size, hashing.digest.hexdigest())
        else:
            self.record(relpath)

    def write_bytes(self, relpath: str, data: bytes) -> None:
        with self.open(relpath, "wb") as handle:
            handle.write(data)

    def write_json(self, relpath: str, obj: Any) -> None:
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
        manifest = {
            "files": {k: e.as_dict() for k, e in sorted(self._entries.items())},
            "metadata": self.metadata,
        }
        marker = join(self._staging, COMPLETE_MARKER)
        with_retry(
            f"write {marker}",
            lambda: _write_once(iter([json.dumps(manifest, indent=2, sort_keys=True).encode()]), marker),
        )
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
            raise _storage_error(uri, FileNotFoundError(errno.ENOENT, "not found", uri), fs)
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


def local_path(uri: str) -> Path:
    """The local path of a local URI (for libraries that only take paths)."""
    scheme, path = _split(uri)
    if scheme != "file":
        raise StorageError(f"{uri}: not a local path")
    return Path(path)


ARTIFACT_ROOT_ENV = "KFTRAIN_ARTIFACT_ROOT"


def output_uri(kfp_uri: str) -> str:
    """Where a step writes an output artifact KFP placed at ``kfp_uri``.

    KFP's local runner only takes a local pipeline root. With ``KFTRAIN_ARTIFACT_ROOT`` set (for
    example ``s3://bucket/runs``), an output KFP put on a local path goes under that root instead,
    keeping its ``<run>/<task>/<output>`` suffix; the step then reports the new URI to KFP, so
    every later step reads it from there. URIs KFP already put in object storage are kept.
    """
    root = os.environ.get(ARTIFACT_ROOT_ENV, "").strip()
    scheme, path = _split(kfp_uri)
    if not root or scheme != "file":
        return kfp_uri
    return join(root, *Path(path).parts[-3:])

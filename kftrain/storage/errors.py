"""What went wrong with a URI, and whether trying again can help.

:class:`StorageError` names the URI and the cause (the S3 error code, a hint for common ones), so a failed step's log
says which artifact and why without a traceback through s3fs. :func:`is_transient` tells throttling, server errors
and dropped connections from errors that never get better; those are retried under :data:`RETRY_POLICY`
(:mod:`kftrain.retry`), above botocore's and s3fs's own retries. The bottom of the package: it imports nothing of it.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

import fsspec

from kftrain.errors import KftrainError, redact_urls
from kftrain.retry import RetryPolicy, call_with_retry, exception_chain

T = TypeVar("T")


class StorageError(KftrainError):
    """A URI that cannot be read or written, named in the message."""


# --------------------------------------------------------------------------------------------------
# Retries

# Bounded: at most 6 tries per chunk or object, waiting 0.25 s * 2**n (capped at 5 s) between them,
# jittered so that replicas that failed together do not come back together. Tests replace this
# module's RETRY_POLICY and sleep (monkeypatch on kftrain.storage.errors): with_retry reads both per call.
RETRY_POLICY = RetryPolicy(attempts=6, initial_s=0.25, max_s=5.0, jitter=True)

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

# A dropped/refused connection or a timeout without an S3 code: botocore, aiohttp and the OS all name
# these differently; their common ground is the class name (or OSError/TimeoutError, checked apart).
_TRANSIENT_CLASS_NAMES = frozenset(
    {
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
    }
)

# A request the server accepted and never answered (or a connection never made) in the connect or read timeout
# (kftrain.storage.uri). botocore has already tried it AWS_MAX_ATTEMPTS times, each waiting the whole timeout:
# retried again here, s3fs's and this layer's tries multiplied a silent server's wait to hours (90 requests of
# the read timeout each were seen). It is an error at once, like a refused connection for cleanups (unreachable).
_TIMEOUT_CLASS_NAMES = frozenset({"ReadTimeoutError", "ConnectTimeoutError", "FSTimeoutError"})


def timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc`` says a request ran out of its connect or read timeout."""
    return any(
        isinstance(e, TimeoutError) or bool({cls.__name__ for cls in type(e).__mro__} & _TIMEOUT_CLASS_NAMES)
        for e in exception_chain(exc)
    )


def error_code(exc: BaseException) -> str | None:
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
    code = error_code(exc)
    if code == "NoSuchUpload":
        return True  # s3fs reports it as FileNotFoundError, but a fresh upload can succeed
    if timed_out(exc):
        return False
    if isinstance(exc, StorageError | FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if code is not None:
        return code in _TRANSIENT_CODES
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _TRANSIENT_CLASS_NAMES) or isinstance(exc, ConnectionError)


def sleep(seconds: float) -> None:
    """The wait between retries. A seam: tests replace it (they restart the server while storage backs off)."""
    time.sleep(seconds)


def with_retry(what: str, operation: Callable[[], T]) -> T:
    """``operation()``, retried under :data:`RETRY_POLICY` while it fails with an :func:`is_transient` error."""
    return call_with_retry(operation, policy=RETRY_POLICY, is_transient=is_transient, what=what, sleep=sleep)


def unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the server could not be reached at all (refused, down, or silent past the timeout).

    Cleaning up after such a failure (aborting an upload) would only wait through another round of
    retries, so callers skip it.
    """
    return timed_out(exc) or any(
        isinstance(e, ConnectionRefusedError) or type(e).__name__ == "EndpointConnectionError"
        for e in exception_chain(exc)
    )


# --------------------------------------------------------------------------------------------------
# Naming the URI and the cause


def is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is an S3 filesystem (s3fs): its errors carry S3 codes and it can be asked about a bucket."""
    protocol = getattr(fs, "protocol", None)
    return protocol is not None and "s3" in (protocol if isinstance(protocol, tuple | list) else (protocol,))


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
        return error_code(exc) or type(exc).__name__
    return None


_HINTS = {
    "NoSuchBucket": "the bucket does not exist",
    "NoSuchKey": "no such object",
    "AccessDenied": "the credentials are not allowed to do this",
    "InvalidAccessKeyId": "the access key id is unknown to the server; check AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "the secret key is wrong; check AWS_SECRET_ACCESS_KEY",
}


# A write the file system has no room for: said plainly, never as a traceback through the writer.
NO_ROOM = {
    errno.ENOSPC: "the file system is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file is larger than the file system (or this process's limit) allows",
}


def no_room(exc: BaseException) -> str | None:
    """Why a write failed for lack of room (a full file system, a quota, a size limit), or None."""
    return next((NO_ROOM[e.errno] for e in exception_chain(exc) if isinstance(e, OSError) and e.errno in NO_ROOM), None)


def storage_error(uri: str, exc: BaseException, fs: fsspec.AbstractFileSystem | None = None) -> StorageError:
    """A StorageError naming ``uri`` and the cause (the S3 error code when there is one)."""
    if isinstance(exc, StorageError):
        return exc
    detail = redact_urls(str(exc)) or type(exc).__name__  # an endpoint given as http://user:pass@host
    room = no_room(exc)
    if room is not None:
        return StorageError(f"{uri}: cannot be written: {room}")
    if timed_out(exc):
        return StorageError(f"{uri}: the store did not answer within its timeouts ({type(exc).__name__}: {detail})")
    code = error_code(exc)
    if (
        fs is not None
        and is_s3(fs)
        and isinstance(exc, FileNotFoundError | PermissionError)
        and code in (None, "404", "403")
    ):
        with suppress(Exception):
            # An S3 URI always has a scheme (s3://, minio://, s3a://); what follows it is bucket/key.
            path = uri.split("://", 1)[1]
            code = _bucket_problem(fs, path) or ("NoSuchKey" if isinstance(exc, FileNotFoundError) else code)
    if code is None:
        if isinstance(exc, FileNotFoundError):
            return StorageError(f"{uri}: not found ({detail})")
        if isinstance(exc, PermissionError):
            return StorageError(f"{uri}: permission denied ({detail})")
        return StorageError(f"{uri}: {type(exc).__name__}: {detail}")
    return StorageError(f"{uri}: {code}: {_HINTS.get(code, detail)}")


@contextmanager
def errors(uri: str, fs: fsspec.AbstractFileSystem | None = None) -> Iterator[None]:
    """Raise whatever goes wrong inside as a :class:`StorageError` naming ``uri`` (chained to the cause)."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        raise storage_error(uri, exc, fs) from exc

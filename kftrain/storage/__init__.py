"""Read and write artifacts by URI: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

Callers use the package: ``from kftrain import storage; storage.upload(path, uri)``. The modules:

- :mod:`~kftrain.storage.uri`: URIs and filesystems: the scheme of a URI, :func:`join`, which S3 endpoint
  and credentials a URI gets from the environment, :func:`filesystem`, :func:`local_path`.
- :mod:`~kftrain.storage.errors`: :class:`StorageError` naming the URI and the cause (the S3 error code),
  which faults are transient, and the retry policy and sleep seam storage retries them with.
- :mod:`~kftrain.storage.io`: small reads and writes, streaming in :data:`CHUNK`-sized ranged reads,
  hashing (:class:`FileDigest`), and one-file copies that restart from the source on a failed write.
- :mod:`~kftrain.storage.artifact`: atomic artifacts: :class:`ArtifactWriter`, the completion marker,
  :func:`require_complete`, and :func:`copy`/:func:`upload`/:func:`download`, which keep the marker last.
- :mod:`~kftrain.storage.s3_transfer`: several multipart-upload parts or ranged reads in flight at once.
- :mod:`~kftrain.storage.outputs`: where a step writes its outputs (``KFTRAIN_ARTIFACT_ROOT``).

Dependencies run one way: errors ← uri ← io ← artifact. The names below are the package's API; the
seams tests replace live in their modules (``errors.RETRY_POLICY``, ``errors.sleep``, ``io.CHUNK``), since
a module reads its own globals: setting ``storage.CHUNK`` would change nothing.
"""

from kftrain.storage.artifact import COMPLETE_MARKER, ArtifactWriter, copy, download, require_complete, upload
from kftrain.storage.errors import StorageError, is_transient
from kftrain.storage.io import (
    CHUNK,
    FileDigest,
    Progress,
    digest_of,
    exists,
    iter_chunks,
    list_files,
    open_uri,
    read_bytes,
    read_json,
    sha256_of,
)
from kftrain.storage.outputs import ARTIFACT_ROOT_ENV, output_uri
from kftrain.storage.uri import filesystem, join, local_path, s3_endpoint

__all__ = [
    "ARTIFACT_ROOT_ENV",
    "CHUNK",
    "COMPLETE_MARKER",
    "ArtifactWriter",
    "FileDigest",
    "Progress",
    "StorageError",
    "copy",
    "digest_of",
    "download",
    "exists",
    "filesystem",
    "is_transient",
    "iter_chunks",
    "join",
    "list_files",
    "local_path",
    "open_uri",
    "output_uri",
    "read_bytes",
    "read_json",
    "require_complete",
    "s3_endpoint",
    "sha256_of",
    "upload",
]

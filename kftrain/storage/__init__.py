"""Read and write artifacts by URI: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

Callers use the package (``from kftrain import storage; storage.upload(path, uri)``). Its modules depend one way:
errors ← paths ← uri ← io ← marker ← publish ← reader ← artifact; beside them partials (locked local staging),
s3_transfer (parts and ranges in flight at once) and outputs (``KFTRAIN_ARTIFACT_ROOT``). How a version is published
and what readers can count on: kftrain/storage/README.md. Tests replace seams in their modules (``errors.sleep``,
``errors.RETRY_POLICY``, ``io.CHUNK``): a module reads its own globals, so setting ``storage.CHUNK`` changes nothing.
"""

from kftrain.storage.artifact import ArtifactWriter, copy, download, require_complete, upload
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
from kftrain.storage.marker import COMPLETE_MARKER
from kftrain.storage.outputs import ARTIFACT_ROOT_ENV, output_uri
from kftrain.storage.paths import confine
from kftrain.storage.publish import check_output
from kftrain.storage.reader import ArtifactReader
from kftrain.storage.uri import (
    check_input_uri,
    check_output_uri,
    derived_uri,
    filesystem,
    join,
    local_path,
    s3_endpoint,
)

__all__ = [
    "ARTIFACT_ROOT_ENV",
    "CHUNK",
    "COMPLETE_MARKER",
    "ArtifactReader",
    "ArtifactWriter",
    "FileDigest",
    "Progress",
    "StorageError",
    "check_input_uri",
    "check_output",
    "check_output_uri",
    "confine",
    "copy",
    "derived_uri",
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

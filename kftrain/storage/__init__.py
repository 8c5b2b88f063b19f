"""Read and write artifacts by URI: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

Callers use the package: ``from kftrain import storage; storage.upload(path, uri)``. The modules:

- :mod:`~kftrain.storage.uri`: URIs and filesystems: the scheme of a URI, :func:`join`, which S3 endpoint
  and credentials a URI gets from the environment, :func:`filesystem`, :func:`local_path`; what an output's
  URI may hold (:func:`check_output_uri`) and the URIs kept beside an output (:func:`derived_uri`).
- :mod:`~kftrain.storage.errors`: :class:`StorageError` naming the URI and the cause (the S3 error code),
  which faults are transient, and the retry policy and sleep seam storage retries them with.
- :mod:`~kftrain.storage.paths`: :func:`confine`, the one check of every relative path read from or
  written into an artifact (listings, markers, ``dataset.json``, a writer's relpaths), local or remote.
- :mod:`~kftrain.storage.io`: small reads and writes, streaming in :data:`CHUNK`-sized ranged reads,
  hashing (:class:`FileDigest`), and one-file copies that restart from the source on a failed write.
- :mod:`~kftrain.storage.marker`: the completion marker's format (:data:`COMPLETE_MARKER`).
- :mod:`~kftrain.storage.partials`: local staging files and folders, locked by their writer, so those of
  dead writers are cleaned and those of live ones never are.
- :mod:`~kftrain.storage.publish`: the output URI (refused when it holds what kftrain did not write), the
  staging beside it, and the publication of a new version.
- :mod:`~kftrain.storage.reader`: :class:`ArtifactReader`: one version, each file checked as it is read.
- :mod:`~kftrain.storage.artifact`: :class:`ArtifactWriter`, :func:`require_complete`, and
  :func:`copy`/:func:`upload`/:func:`download`.
- :mod:`~kftrain.storage.s3_transfer`: several multipart-upload parts or ranged reads in flight at once.
- :mod:`~kftrain.storage.outputs`: where a step writes its outputs (``KFTRAIN_ARTIFACT_ROOT``).

Publishing, and what readers can count on
-----------------------------------------

An artifact is a folder (a prefix) whose ``_COMPLETE.json`` lists every file with its size and SHA-256;
its files sit at their plain relative paths, so tools outside kftrain use it as a plain folder (a model
server loads ``<name>/1/model.pt``, KFP's UI links to files). A new version is always written to a
staging sibling, ``<uri>.partial-<id>``, never over the current one. Then:

- local folders: the staging folder is renamed into place (swapped with the previous version atomically
  where the kernel can, ``renameat2``); a reader sees the old version or the new one. Staging folders of
  writers that died are locked by no one, and the next writer beside them removes them.
- object stores, which cannot rename a prefix:
  1. the root marker is replaced by the new manifest plus ``"staged": "<name>.partial-<id>"`` (one PUT,
     the commit point): readers now read the new version from staging, where it is whole;
  2. each file is copied server-side to its plain path; files of the old version that the new one lacks
     are removed (listed as ``"superseded"``, so a later writer knows they were ours);
  3. the staging marker is copied over the root marker: readers read the plain paths again;
  4. the staging prefix is removed (and a dead writer's staging that an older marker still named).

Guarantees. Until step 1 the previous version is untouched and readable, so a writer killed while
writing, or failing, loses nothing (its staging prefix is left for a bucket lifecycle rule). From step 1
the new version is complete and readable through its marker, whatever happens next; a writer killed in
steps 2-4 leaves a marker that still points at its staging, and the next writer finishes the cleanup.
Readers through kftrain (:class:`ArtifactReader`, :func:`copy`) never mix versions: they pin the manifest
they resolved, check every size and the first read's SHA-256 against it, follow a promotion of the same
version from staging to the plain paths, and fail with "re-published while being read" when the
manifest itself changed. Trade-offs: every object-store publication costs a server-side copy of each
file (no bytes through the client, but time proportional to the size); tools that read the plain paths
without the marker can see a mix of the two versions during step 2 (seconds, while the copies run);
two writers publishing the same URI at once is not supported (KFP gives every task its own URI).

Outputs never delete what they did not write: a destination that holds a file its previous marker does
not account for (or has no marker at all) is refused, naming the file, before anything is written.

Dependencies run one way: errors ← paths ← uri ← io ← marker ← publish ← reader ← artifact. The names
below are the package's API; the seams tests replace live in their modules (``errors.RETRY_POLICY``,
``errors.sleep``, ``io.CHUNK``), since a module reads its own globals: setting ``storage.CHUNK`` would
change nothing.
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

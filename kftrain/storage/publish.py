"""Where an artifact is published, and how a new version replaces the old one without ever losing it.

:func:`open_destination` refuses, naming the file that would be lost, an output URI that is not absent, empty or a
complete kftrain artifact whose marker accounts for every file (``--model-dir .``). The new version goes to a staging
sibling ``<uri>.partial-<id>``; :meth:`Destination.promote` makes it current, :meth:`Destination.abort` removes it.
Locally the staging folder is locked while written (:mod:`kftrain.storage.partials`) and swapped into place with
``renameat2(RENAME_EXCHANGE)`` where the kernel has it (else two renames). Object stores: kftrain/storage/README.md.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
from collections.abc import Iterable
from contextlib import suppress

from kftrain.storage import partials
from kftrain.storage.errors import StorageError, errors, with_retry
from kftrain.storage.io import list_files, read_bytes, write_once
from kftrain.storage.marker import COMPLETE_MARKER, Manifest, parse, staging_name
from kftrain.storage.uri import check_output_uri, filesystem, join, split_uri


def sibling(uri: str, name: str) -> str:
    """The URI of ``name`` in the same folder as ``uri``."""
    head = uri.rstrip("/").rsplit("/", 1)[0]
    return f"{head}/{name}"


def check_replaceable(uri: str, listing: Iterable[str], previous: Manifest | None) -> None:
    """Refuse to publish over ``uri`` unless everything there belongs to a kftrain artifact (or nothing is)."""
    present = sorted(listing)
    if not present:
        return
    hint = "an output never replaces files it did not write: give a new or an empty folder"
    if previous is None:
        more = f" and {len(present) - 1} more" if len(present) > 1 else ""
        raise StorageError(f"{uri}: not empty and not a kftrain artifact (it holds {present[0]!r}{more}); {hint}")
    ours = set(previous.files) | set(previous.superseded) | {COMPLETE_MARKER}
    foreign = [rel for rel in present if rel not in ours]
    if foreign:
        raise StorageError(f"{uri}: holds {foreign[0]!r}, which is not part of the kftrain artifact there; {hint}")


def _previous_manifest(uri: str, listing: list[str]) -> Manifest | None:
    if COMPLETE_MARKER not in listing:
        return None
    try:
        return parse(read_bytes(join(uri, COMPLETE_MARKER)), uri)
    except StorageError as exc:
        raise StorageError(f"{exc}; an output never replaces files it did not write") from None


class Destination:
    """An output URI being published: a staging location, then the new version made current."""

    uri: str
    staging_uri: str
    previous: Manifest | None

    def promote(self, manifest: Manifest) -> None:
        """Make the version in staging (its marker already written there) the current one at :attr:`uri`."""
        raise NotImplementedError

    def abort(self) -> None:
        """Remove the staging; the previous version stays as it was."""
        raise NotImplementedError


def check_output(uri: str) -> None:
    """Refuse ``uri`` now if publishing an artifact there would be refused later (it holds files that are not
    a previous kftrain artifact's): a program checks its output before hours of work, not after. Reads only."""
    scheme, path = split_uri(check_output_uri(uri))
    where = (path.rstrip(os.sep) or os.sep) if scheme == "file" else uri.rstrip("/")
    replaceable_previous(where, _local_listing(where) if scheme == "file" else list_files(where))


def replaceable_previous(where: str, listing: list[str]) -> Manifest | None:
    """The complete artifact at ``where`` (None if none), once :func:`check_replaceable` allows replacing it."""
    previous = _previous_manifest(where, listing)
    check_replaceable(where, listing, previous)
    return previous


def open_destination(uri: str) -> Destination:
    """A destination for a new version of the artifact at ``uri``; refused if it would lose anything there."""
    scheme, path = split_uri(check_output_uri(uri))
    if scheme == "file":
        return _LocalDestination(uri, path.rstrip(os.sep) or os.sep)
    return _ObjectDestination(uri.rstrip("/"))


# --------------------------------------------------------------------------------------------------
# Local folders


def _local_listing(final: str) -> list[str]:
    """Relative paths of what holds data under ``final``: files, and symbolic links (never followed).

    Empty folders hold nothing to lose (a SavedModel has an empty ``assets/``), so they do not count.
    """
    hint = "an output never replaces what it did not write"
    if os.path.islink(final):
        raise StorageError(f"{final}: is a symbolic link; {hint}: give the folder it points to, or a new one")
    if os.path.exists(final) and not os.path.isdir(final):
        if os.path.isfile(final) and os.path.getsize(final) == 0:
            return []  # an empty placeholder file: nothing to lose
        raise StorageError(f"{final}: exists and is not a folder; {hint}")
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(final):
        rel_dir = os.path.relpath(dirpath, final)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in filenames)
        found.extend(prefix + d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))
    return found


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)


class _LocalDestination(Destination):
    def __init__(self, uri: str, final: str) -> None:
        self.uri = uri
        self.final = final
        partials.clean_stale(final)  # staging left by writers that died
        self.previous = replaceable_previous(final, _local_listing(final))
        with errors(final):
            self.staging_uri, self._lock_fd = partials.make_staging_dir(final)

    def promote(self, manifest: Manifest) -> None:
        final = self.final
        with errors(final):
            listing = _local_listing(final)  # again: files may have been added since we started
            check_replaceable(final, listing, _previous_manifest(final, listing) if listing else None)
            if not listing and os.path.isfile(final):
                os.remove(final)  # the empty placeholder
            if not listing or not os.path.exists(final):
                os.rename(self.staging_uri, final)  # onto an empty folder, or where nothing is
            elif _exchange(self.staging_uri, final):
                shutil.rmtree(self.staging_uri, ignore_errors=True)  # now the previous version
            else:
                old = f"{final}{partials.INFIX}{uuid.uuid4().hex[:12]}"
                os.rename(final, old)
                try:
                    os.rename(self.staging_uri, final)
                except BaseException:
                    os.rename(old, final)  # the previous version back where it was
                    raise
                shutil.rmtree(old, ignore_errors=True)  # if we die first, the next writer's clean_stale does it
        partials.release(self._lock_fd)

    def abort(self) -> None:
        shutil.rmtree(self.staging_uri, ignore_errors=True)
        partials.release(self._lock_fd)


# --------------------------------------------------------------------------------------------------
# Object stores


class _ObjectDestination(Destination):
    def __init__(self, uri: str) -> None:
        self.uri = uri
        _, path = split_uri(uri)
        if "/" not in path.strip("/"):
            raise StorageError(f"{uri}: an artifact needs a prefix inside the bucket, not the bucket itself")
        self.previous = replaceable_previous(uri, list_files(uri))  # an absent prefix lists nothing
        self.name = staging_name(uri.rsplit("/", 1)[-1], uuid.uuid4().hex[:12])
        self.staging_uri = sibling(uri, self.name)
        self._committed = False

    def promote(self, manifest: Manifest) -> None:
        uri, previous = self.uri, self.previous
        current = set(manifest.files)
        superseded = set(previous.files) | set(previous.superseded) if previous else set()
        pointer = Manifest(manifest.files, manifest.metadata, self.name, tuple(sorted(superseded - current)))
        marker = join(uri, COMPLETE_MARKER)
        # 1. The commit point: readers now read the new version from staging, where it is whole.
        with_retry(f"write {marker}", lambda: write_once(iter([pointer.to_bytes()]), marker))
        self._committed = True  # from here on, staging holds the current version: abort() must keep it
        # 2. Its files to the plain paths (server-side copies), then the replaced version's other files removed.
        for rel in sorted(manifest.files):
            self._server_copy(join(self.staging_uri, rel), join(uri, rel))
        for rel in pointer.superseded:
            self._remove(join(uri, rel))
        # 3. The plain marker (the staging one, byte for byte): readers read the plain paths again.
        self._server_copy(join(self.staging_uri, COMPLETE_MARKER), marker)
        # 4. Staging is no longer read by anyone who reads the marker now; remove it, and a dead writer's.
        self._remove_prefix(self.staging_uri)
        if previous is not None and previous.staged and previous.staged != self.name:
            self._remove_prefix(sibling(uri, previous.staged))

    def abort(self) -> None:
        if not self._committed:
            self._remove_prefix(self.staging_uri)

    # cp_file and rm_file take a path as it is: copy and rm would read * ? [ as a glob.

    @staticmethod
    def _server_copy(src: str, dst: str) -> None:
        fs, src_path = filesystem(src)
        _, dst_path = filesystem(dst)
        with errors(dst, fs):
            with_retry(f"copy {src} -> {dst}", lambda: fs.cp_file(src_path, dst_path))

    @staticmethod
    def _remove(uri: str) -> None:
        fs, path = filesystem(uri)
        with errors(uri, fs), suppress(FileNotFoundError):
            with_retry(f"remove {uri}", lambda: fs.rm_file(path))

    @staticmethod
    def _remove_prefix(uri: str) -> None:
        fs, path = filesystem(uri)
        with suppress(Exception):  # best effort: nothing reads a prefix no marker names
            files = fs.find(path.rstrip("/"))
            if files:
                fs.rm(files)

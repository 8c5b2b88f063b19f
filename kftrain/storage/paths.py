"""Relative paths inside an artifact: the one check every such path goes through, read or written.

Paths inside an artifact come from places a writer or an attacker controls: an object store's listing (a
key may be ``x/../../etc/cron.d/job``), a completion marker, a ``dataset.json``, a caller's ``relpath``.
:func:`confine` accepts only a clean relative POSIX path (no ``..``, ``.``, empty or absolute parts, no
NUL) and names the offender otherwise; :func:`local_target` also refuses a local path that leaves its
root through a symbolic link. Nothing joins a relative path to an artifact's root without them.
"""

from __future__ import annotations

import os

from kftrain.storage.errors import StorageError


def confine(rel: object, where: str) -> str:
    """``rel`` if it is a clean relative POSIX path that stays inside an artifact; else an error naming ``where``."""
    if not isinstance(rel, str) or not rel:
        raise StorageError(f"{where}: {rel!r} is not a path inside the artifact (expected a non-empty relative path)")
    problem = None
    if "\0" in rel:
        problem = "contains a NUL character"
    elif rel.startswith("/"):
        problem = "is absolute"
    else:
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts):
            problem = "has an empty, '.' or '..' part"
    if problem:
        shown = rel if len(rel) <= 200 else rel[:200] + "..."
        raise StorageError(f"{where}: {shown!r} {problem}: a path inside an artifact must stay inside it")
    return rel


def local_target(root: str, rel: str) -> str:
    """The local path of ``rel`` under the local folder ``root``, checked by :func:`confine` and not leaving
    ``root`` through a symbolic link (one already there, or one on the way)."""
    confine(rel, root)
    target = os.path.join(root, *rel.split("/"))
    real_root = os.path.realpath(root)
    real = os.path.realpath(target)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise StorageError(f"{target}: leads outside {root} (to {real}) through a symbolic link")
    return target

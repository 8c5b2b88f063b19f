"""A pod's volumes and a container's volume mounts as the API server checks them
(``kubernetes/kubernetes@v1.36.3:pkg/apis/core/validation/validation.go``: ValidateVolumes, ValidateVolumeMounts)."""

from __future__ import annotations

from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.pod_checks import is_dns1123_label, list_of, mapping, mount_path, shown, text

VOLUME_MOUNT_FIELDS = (
    "name",
    "mountPath",
    "readOnly",
    "recursiveReadOnly",
    "subPath",
    "subPathExpr",
    "mountPropagation",
)


def volumes(field: str, value: Any) -> list[dict[str, Any]]:
    """A pod's volumes as ValidateVolumes checks them: each a name (a DNS-1123 label, used once) and exactly one
    source (``persistentVolumeClaim``, ``secret``, ``emptyDir``...)."""
    seen: dict[str, int] = {}
    out = []
    for i, volume in enumerate(list_of(field, value)):
        given = mapping(f"{field}[{i}]", volume)
        name_ = text(f"{field}[{i}].name", given.get("name", ""))
        if not is_dns1123_label(name_):
            raise JobSpecError(
                f"{field}[{i}].name",
                f"{shown(name_)} is not a valid volume name: a DNS-1123 label (at most 63 lower-case letters, digits "
                "and '-', no '.')",
            )
        if name_ in seen:
            raise JobSpecError(
                f"{field}[{i}].name", f"{name_!r} is already the name of {field}[{seen[name_]}]: each once"
            )
        seen[name_] = i
        sources = [k for k in given if k != "name"]
        if len(sources) != 1:
            raise JobSpecError(
                f"{field}[{i}]",
                "must specify a volume type (persistentVolumeClaim, secret, emptyDir...)"
                if not sources
                else f"may not specify more than 1 volume type (got {', '.join(map(str, sources))})",
            )
        mapping(f"{field}[{i}].{sources[0]}", given[sources[0]])
        out.append(dict(given))
    return out


def volume_mounts(field: str, value: Any) -> list[dict[str, Any]]:
    """A container's volume mounts as ValidateVolumeMounts checks them, the volumes aside (a pod's check): each names
    a volume and an absolute path (:func:`mount_path`), every path once."""
    seen: dict[str, int] = {}
    out = []
    for i, mount in enumerate(list_of(field, value)):
        given = mapping(f"{field}[{i}]", mount)
        unknown = sorted(str(k) for k in given if k not in VOLUME_MOUNT_FIELDS)
        if unknown:
            raise JobSpecError(f"{field}[{i}].{unknown[0]}", f"unknown field (known: {', '.join(VOLUME_MOUNT_FIELDS)})")
        if not text(f"{field}[{i}].name", given.get("name", "")):
            raise JobSpecError(f"{field}[{i}].name", "missing: the name of a volume of the pod")
        path = mount_path(f"{field}[{i}].mountPath", given.get("mountPath", ""))
        if path in seen:
            raise JobSpecError(
                f"{field}[{i}].mountPath", f"{path!r} is already mounted by {field}[{seen[path]}]: each path once"
            )
        seen[path] = i
        out.append(dict(given))
    return out

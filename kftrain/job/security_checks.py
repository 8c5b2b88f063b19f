"""A container's ``securityContext`` as the API server checks it (ValidateSecurityContext), and which of its fields
a pod's securityContext shares; the rules are cited beside the fields below."""

from __future__ import annotations

from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.pod_checks import INT32_MAX, integer, list_of, mapping, shown, text

# A container's SecurityContext: its fields (kubernetes@v1.36.3:staging/src/k8s.io/api/core/v1/types.go,
# SecurityContext), and the values pkg/apis/core/validation/validation.go takes (ValidateSecurityContext,
# validateSeccompProfileField, ValidateAppArmorProfileField, ValidateProcMountType; apimachinery's IsValidUserID and
# IsValidGroupID: 0 to 2147483647). First the fields a pod's securityContext shares with a container's (types.go,
# PodSecurityContext): a container that sets none of them takes the pod's.
POD_SECURITY_CONTEXT_FIELDS = (
    "appArmorProfile",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxOptions",
    "seccompProfile",
    "windowsOptions",
)
# Those a container's alone has.
CONTAINER_ONLY_SECURITY_FIELDS = (
    "allowPrivilegeEscalation",
    "capabilities",
    "privileged",
    "procMount",
    "readOnlyRootFilesystem",
)
SECURITY_CONTEXT_FIELDS = tuple(sorted((*POD_SECURITY_CONTEXT_FIELDS, *CONTAINER_ONLY_SECURITY_FIELDS)))
# The profiles a securityContext may name, each of one of these types.
PROFILES = ("seccompProfile", "appArmorProfile")
PROFILE_TYPES = ("RuntimeDefault", "Localhost", "Unconfined")
PROC_MOUNT_TYPES = ("Default", "Unmasked")


def security_context(field: str, value: Any) -> dict[str, Any]:
    """A container's ``securityContext`` as the API server checks it: known fields only, each of its type, user and
    group ids in range, a profile's type and its ``localhostProfile`` together, and neither ``privileged`` nor an
    added CAP_SYS_ADMIN with ``allowPrivilegeEscalation: false`` (ValidateSecurityContext)."""
    given = dict(mapping(field, value))
    unknown = sorted(str(k) for k in given if k not in SECURITY_CONTEXT_FIELDS)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(SECURITY_CONTEXT_FIELDS)})")
    for key in ("allowPrivilegeEscalation", "privileged", "readOnlyRootFilesystem", "runAsNonRoot"):
        if key in given and not isinstance(given[key], bool):
            raise JobSpecError(f"{field}.{key}", f"expected true or false, got {shown(given[key])}")
    for key in ("runAsUser", "runAsGroup"):
        if key in given:
            given[key] = integer(f"{field}.{key}", given[key], low=0, high=INT32_MAX)
    if "capabilities" in given:
        caps = mapping(f"{field}.capabilities", given["capabilities"])
        for key in caps:
            if key not in ("add", "drop"):
                raise JobSpecError(f"{field}.capabilities.{key}", "unknown field (known: add, drop)")
            for i, cap in enumerate(list_of(f"{field}.capabilities.{key}", caps[key])):
                text(f"{field}.capabilities.{key}[{i}]", cap)
    for key in PROFILES:
        if key in given:
            profile = mapping(f"{field}.{key}", given[key])
            kind = profile.get("type")
            if kind not in PROFILE_TYPES:
                raise JobSpecError(f"{field}.{key}.type", f"{shown(kind)} must be one of {', '.join(PROFILE_TYPES)}")
            if (kind == "Localhost") != bool(profile.get("localhostProfile")):
                raise JobSpecError(
                    f"{field}.{key}.localhostProfile", "must be set when, and only when, type is Localhost"
                )
    if "procMount" in given and given["procMount"] not in PROC_MOUNT_TYPES:
        raise JobSpecError(f"{field}.procMount", f"{shown(given['procMount'])} must be Default or Unmasked")
    for key in ("seLinuxOptions", "windowsOptions"):
        if key in given:
            mapping(f"{field}.{key}", given[key])
    if given.get("allowPrivilegeEscalation") is False:
        if given.get("privileged") is True:
            raise JobSpecError(field, "cannot set allowPrivilegeEscalation to false and privileged to true")
        if "CAP_SYS_ADMIN" in ((given.get("capabilities") or {}).get("add") or []):
            raise JobSpecError(field, "cannot set allowPrivilegeEscalation to false and capabilities.add CAP_SYS_ADMIN")
    return given

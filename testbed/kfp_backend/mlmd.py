"""What ML Metadata keeps of an output artifact's metadata: what every later task of the run is given.

A downstream step reads ``{"list": [1, 2]}`` for a list its upstream wrote, ``1`` for ``true``, and a metadata
field set to ``None`` fails the upstream task after its code succeeded: the two conversions, with their upstream
lines, are in the comment below the imports.
"""

from __future__ import annotations

import itertools
from typing import Any

# The launcher records each output artifact in MLMD and the driver of a later task reads it back; its metadata goes
# through both conversions (A = kubeflow/pipelines@2.5.0:backend/src/v2/metadata/converter.go, B = the same file at
# 2.17.0, which still records in MLMD):
#
# - recording (toMLMDArtifact, A:110-131, B:110-136): each top-level field through StructValueToMLMDValue
#   (A:133-166, B:138-171): a string stays a string, a number becomes a double, a boolean the integer 1 or 0, a
#   list the struct ``{"list": [...]}``, a struct ``{"struct": {...}}``; a null is "unknown/unsupported value type"
#   and fails the task ("unable to produce MLMD artifact for output", launcher_v2.go@2.5.0:577). What is inside a
#   list or struct is kept as it is (nulls and booleans included). B skips ``_kfp_workspace`` (B:122-126);
# - reading (toRuntimeArtifact, A:176-216, B:181-221): a double or an integer becomes a number, a struct stays
#   that struct; the artifact's ``name`` is its MLMD id;
# - RecordArtifact adds ``display_name`` (the output's name) and ``store_session_info`` where absent
#   (kubeflow/pipelines@2.5.0:backend/src/v2/metadata/client.go:1038-1054; @2.17.0 client.go:1234-1250).
#
# So a downstream step reads ``{"list": [1, 2]}`` for a list its upstream wrote, ``1`` for ``true``, and a
# metadata field set to ``None`` fails the upstream task after its code succeeded.


_ids = itertools.count(1)


class MetadataError(Exception):
    """MLMD refuses the metadata: the task fails after its command succeeded."""


def recorded(name: str, metadata: dict[str, Any], session_info: str) -> dict[str, Any]:
    """``metadata`` of output ``name`` as a later task reads it back from MLMD."""
    stored: dict[str, Any] = {}
    for key, value in metadata.items():
        if key == "_kfp_workspace":
            continue
        stored[key] = _as_mlmd_value(name, key, value)
    stored.setdefault("display_name", name)
    stored.setdefault("store_session_info", session_info)
    return stored


def artifact_id() -> str:
    """A new MLMD artifact id, as a later task's executor input names the artifact."""
    return str(next(_ids))


def _as_mlmd_value(name: str, key: str, value: Any) -> Any:
    if value is None:
        raise MetadataError(
            f"unable to produce MLMD artifact for output {name!r}: failed to convert RuntimeArtifact to MLMD "
            f"artifact: unknown/unsupported value type *structpb.Value_NullValue (metadata field {key!r})"
        )
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return {"list": value}
    if isinstance(value, dict):
        return {"struct": value}
    return value

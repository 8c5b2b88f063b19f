"""What the fake API server serves: the plural, kind and API group of every job kind, and the shapes of its answers.

Every kind of :data:`kftrain.job.kinds.KINDS` is served (its group, plural and versions are its own facts, so a kind
added there is served with no edit here); a ``Status`` body, RFC 7386 merge patch and the timestamp format are the
API server's.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from kftrain.job.kinds import KINDS, Kind

# The jobs served, by plural: every kind of the one list of kinds, with its kind name and API group.
KIND_NAMES: dict[str, str] = {k.spec.plural: k.spec.kind for k in KINDS}
GROUPS: dict[str, str] = {k.spec.plural: k.spec.group for k in KINDS}
# The versions each plural is served at unless a test says otherwise (FakeKube.served): its kind's preferred one.
DEFAULT_SERVED: dict[str, list[str]] = {k.spec.plural: [k.spec.version] for k in map(KINDS.get, KINDS.names())}


def _plurals_by_group() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for plural, group in GROUPS.items():
        out.setdefault(group, []).append(plural)
    return out


PLURALS_BY_GROUP = _plurals_by_group()


def group_of(plural: str) -> str:
    return GROUPS[plural]


def kind_at(plural: str, api_version: str | None = None) -> Kind:
    """The kind served as ``plural`` at ``api_version`` (None: its preferred version)."""
    return KINDS.get(KIND_NAMES[plural], api_version)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out

"""Label and field selectors as the fake API server applies them to the objects it lists and watches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def parse_selector(text: str | None) -> dict[str, str]:
    """Equality-based selectors only (``a=b,c==d``): all the backend uses."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, _, value = part.replace("==", "=").partition("=")
        out[key.strip()] = value.strip()
    return out


def dotted(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for key in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def matches(obj: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    if any(have.get(k) != v for k, v in labels.items()):
        return False
    return all(str(dotted(obj, k)) == v for k, v in fields.items())

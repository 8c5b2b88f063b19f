"""The checks of a platform's pod settings (:class:`~kftrain.job.pod_settings.PodSettings`) as the API server would
make them, before anything is created: each function checks one kind of value and names the input and what a
valid value looks like when it refuses it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kftrain.errors import JobSpecError

# Kubernetes quantities (resource.Quantity): a number with an optional SI or binary suffix.
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RFC 1123 subdomain: secret, claim, service account and priority class names.
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_OPERATORS = {"Exists", "Equal"}
_TOLERATION_EFFECTS = {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}


def integer(field: str, value: Any) -> int:
    # KFP hands int parameters to a component as numbers; a whole float is an int given through a list or JSON.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(field, f"expected an integer, got {value!r}")
    return value


def quantity(field: str, value: Any) -> str:
    text = str(value).strip()
    if text and not _QUANTITY.match(text):
        raise JobSpecError(field, f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    return text


def name(field: str, value: Any) -> str:
    text = str(value)
    if text and (len(text) > 253 or not _OBJECT_NAME.match(text)):
        raise JobSpecError(field, f"{value!r} is not a valid name (lower-case letters, digits, '-' and '.')")
    return text


def env_name(field: str, name: str) -> str:
    if not _ENV_NAME.match(name):
        raise JobSpecError(f"{field}.{name}", "is not a valid environment variable name")
    return name


def secret_ref(field: str, value: str) -> tuple[str, str]:
    secret, sep, key = value.partition("/")
    if not sep or not secret or not key or not _SECRET_KEY.match(key):
        raise JobSpecError(field, f"{value!r} must be SECRET_NAME/KEY (the value is read from that secret's key)")
    return name(field, secret), key


def mount_path(field: str, path: str) -> str:
    if not path.startswith("/") or ":" in path:
        raise JobSpecError(field, "the mount path must be absolute, without ':'")
    return path


def list_of(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise JobSpecError(field, f"expected a list, got {type(value).__name__}")
    return value


def string_map(field: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise JobSpecError(field, f"expected a mapping, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise JobSpecError(f"{field}.{k}", f"expected a string, got {type(v).__name__} {v!r}")
    return {str(k): v for k, v in value.items()}


def toleration(index: int, value: Any) -> dict[str, Any]:
    field = f"tolerations[{index}]"
    if not isinstance(value, Mapping):
        raise JobSpecError(field, f"expected a toleration mapping (key, operator, value, effect), got {value!r}")
    unknown = sorted(set(value) - _TOLERATION_KEYS)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_TOLERATION_KEYS))})")
    if value.get("operator", "Equal") not in _TOLERATION_OPERATORS:
        raise JobSpecError(f"{field}.operator", f"{value.get('operator')!r} must be Exists or Equal")
    if value.get("effect", "") not in _TOLERATION_EFFECTS:
        raise JobSpecError(
            f"{field}.effect", f"{value.get('effect')!r} must be NoSchedule, PreferNoSchedule or NoExecute"
        )
    return dict(value)

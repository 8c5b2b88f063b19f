"""The launch components' platform inputs, checked and turned into :class:`kftrain.job.pods.PodSettings`.

Every error names the input and what a valid value looks like, before anything is created.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.model import SchedulingPolicy
from kftrain.job.pods import PodSettings
from kftrain.job.serde import from_dict

# Kubernetes quantities (resource.Quantity): a number with an optional SI or binary suffix.
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RFC 1123 subdomain: secret, claim, service account and priority class names.
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_OPERATORS = {"Exists", "Equal"}
_TOLERATION_EFFECTS = {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}
# The inputs this module reads, with the defaults that mean "not set".
POD_INPUTS = (
    "cpu",
    "memory",
    "gpus",
    "shm_size",
    "node_selector",
    "tolerations",
    "service_account",
    "image_pull_secrets",
    "priority_class",
    "secret_env",
    "storage_secret",
    "pvc_mounts",
    "queue_name",
    "scheduling",
    "ttl_seconds_after_finished",
)


def pod_settings_from_inputs(inputs: Mapping[str, Any]) -> PodSettings:
    """The platform settings a launch component's inputs ask for; unknown or malformed values are refused."""
    get = inputs.get
    gpus = _integer("gpus", get("gpus") or 0)
    if gpus < 0:
        raise JobSpecError("gpus", f"must be >= 0, got {gpus}")
    ttl = _integer("ttl_seconds_after_finished", get("ttl_seconds_after_finished", -1))
    return PodSettings(
        cpu=_quantity("cpu", get("cpu") or ""),
        memory=_quantity("memory", get("memory") or ""),
        gpus=gpus,
        shm_size=_quantity("shm_size", get("shm_size") or ""),
        node_selector=_string_map("node_selector", get("node_selector") or {}),
        tolerations=[_toleration(i, t) for i, t in enumerate(_list("tolerations", get("tolerations") or []))],
        service_account=_name("service_account", get("service_account") or ""),
        image_pull_secrets=[
            _name(f"image_pull_secrets[{i}]", s)
            for i, s in enumerate(_list("image_pull_secrets", get("image_pull_secrets") or []))
        ],
        priority_class=_name("priority_class", get("priority_class") or ""),
        secret_env={
            _env_name("secret_env", k): _secret_ref(f"secret_env.{k}", v)
            for k, v in _string_map("secret_env", get("secret_env") or {}).items()
        },
        storage_secret=_name("storage_secret", get("storage_secret") or ""),
        pvc_mounts={
            _mount_path(f"pvc_mounts.{path}", path): _name(f"pvc_mounts.{path}", claim)
            for path, claim in _string_map("pvc_mounts", get("pvc_mounts") or {}).items()
        },
        queue_name=_name("queue_name", get("queue_name") or ""),
        scheduling=from_dict(SchedulingPolicy, get("scheduling"), "scheduling") if get("scheduling") else None,
        ttl_seconds_after_finished=None if ttl < 0 else ttl,
    )


def _integer(field: str, value: Any) -> int:
    # KFP hands int parameters to a component as numbers; a whole float is an int given through a list or JSON.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(field, f"expected an integer, got {value!r}")
    return value


def _quantity(field: str, value: Any) -> str:
    text = str(value).strip()
    if text and not _QUANTITY.match(text):
        raise JobSpecError(field, f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    return text


def _name(field: str, value: Any) -> str:
    text = str(value)
    if text and (len(text) > 253 or not _OBJECT_NAME.match(text)):
        raise JobSpecError(field, f"{value!r} is not a valid name (lower-case letters, digits, '-' and '.')")
    return text


def _env_name(field: str, name: str) -> str:
    if not _ENV_NAME.match(name):
        raise JobSpecError(f"{field}.{name}", "is not a valid environment variable name")
    return name


def _secret_ref(field: str, value: str) -> tuple[str, str]:
    secret, sep, key = value.partition("/")
    if not sep or not secret or not key or not _SECRET_KEY.match(key):
        raise JobSpecError(field, f"{value!r} must be SECRET_NAME/KEY (the value is read from that secret's key)")
    return _name(field, secret), key


def _mount_path(field: str, path: str) -> str:
    if not path.startswith("/") or ":" in path:
        raise JobSpecError(field, "the mount path must be absolute, without ':'")
    return path


def _list(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise JobSpecError(field, f"expected a list, got {type(value).__name__}")
    return value


def _string_map(field: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise JobSpecError(field, f"expected a mapping, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise JobSpecError(f"{field}.{k}", f"expected a string, got {type(v).__name__} {v!r}")
    return {str(k): v for k, v in value.items()}


def _toleration(index: int, value: Any) -> dict[str, Any]:
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

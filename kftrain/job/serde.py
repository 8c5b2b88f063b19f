"""One mechanism to map the typed job model to and from Kubernetes-style dicts.

Every model dataclass names the JSON key of each field with :func:`json_field`.
A dataclass that may meet fields it does not model (a pod spec's volumes, a
container's volumeMounts) declares ``extra: dict`` and receives them there
untouched, so a manifest round-trips without loss. A dataclass without
``extra`` rejects unknown keys with an error naming the field path.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from kftrain.errors import JobSpecError

T = TypeVar("T")

EXTRA_FIELD = "extra"


INT64 = 64
INT32 = 32


def json_field(key: str, default: Any = None, *, bits: int = INT64, **kwargs: Any) -> Any:
    """A dataclass field serialized under the Kubernetes-style ``key``.

    ``bits`` is the width of an integer field in the CRD's schema (``format: int32`` or ``int64``): a value
    outside it is refused by the API server, so it is refused here, naming the field.
    """
    metadata = {"json": key, "bits": bits}
    if "default_factory" in kwargs:
        return dataclasses.field(metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def extra_field() -> Any:
    """The catch-all for fields the model does not type."""
    return dataclasses.field(default_factory=dict, metadata={"extra": True})


def to_dict(obj: Any) -> dict[str, Any]:
    """Serialize a model dataclass; ``None`` fields are omitted, as kubectl omits them."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.metadata.get("extra"):
            continue
        value = getattr(obj, f.name)
        if value is None:
            continue
        out[f.metadata["json"]] = _encode(value)
    if hasattr(obj, EXTRA_FIELD):
        for key, value in getattr(obj, EXTRA_FIELD).items():
            out.setdefault(key, copy.deepcopy(value))
    return out


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return copy.deepcopy(value)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    # Evaluating annotations compiles each one: once per class, not once per env var of a large manifest.
    return get_type_hints(cls)


def from_dict(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from a dict, with errors that name the dotted ``path`` of the bad field."""
    if not isinstance(data, Mapping):
        raise JobSpecError(path, f"expected a mapping, got {_describe(data)}")
    hints = _type_hints(typing.cast(type, cls))
    kwargs: dict[str, Any] = {}
    known_keys: set[str] = set()
    has_extra = False
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.metadata.get("extra"):
            has_extra = True
            continue
        key = f.metadata["json"]
        known_keys.add(key)
        if key in data and data[key] is not None:
            kwargs[f.name] = _decode(hints[f.name], data[key], f"{path}.{key}", f.metadata["bits"])
    unknown = {k: copy.deepcopy(v) for k, v in data.items() if k not in known_keys}
    if unknown:
        if not has_extra:
            first = sorted(unknown, key=str)[0]
            allowed = ", ".join(sorted(known_keys))
            raise JobSpecError(f"{path}.{first}", f"unknown field (known fields here: {allowed})")
        kwargs[EXTRA_FIELD] = unknown
    return cls(**kwargs)


def _decode(tp: Any, value: Any, path: str, bits: int = INT64) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return _decode(options[0], value, path, bits)
        errors = []
        for option in options:
            try:
                return _decode(option, value, path, bits)
            except JobSpecError as exc:
                errors.append(exc.message)
        raise JobSpecError(path, " or ".join(errors))
    if tp is Any:
        return copy.deepcopy(value)
    if origin is list:
        (item_tp,) = get_args(tp)
        if not isinstance(value, list):
            raise JobSpecError(path, f"expected a list, got {_describe(value)}")
        return [_decode(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, value_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise JobSpecError(path, f"expected a mapping, got {_describe(value)}")
        return {str(k): _decode(value_tp, v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in tp)
            raise JobSpecError(path, f"{value!r} is not one of: {allowed}") from None
    if dataclasses.is_dataclass(tp):
        return from_dict(typing.cast(type, tp), value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise JobSpecError(path, f"expected true or false, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise JobSpecError(path, f"expected an integer, got {_describe(value)}")
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if not low <= value <= high:
            raise JobSpecError(path, f"{_describe_int(value)} is outside the int{bits} range [{low}, {high}]")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise JobSpecError(path, f"expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"serde cannot decode type {tp!r} at {path}")  # a bug in the model, not user input


def _describe_int(value: int) -> str:
    # A huge integer is described by its size: printing it may be long, or refused (over 4300 digits).
    return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"


def _describe(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int {_describe_int(value)}"
    if isinstance(value, str | bytes) and len(value) > 100:
        value = value[:100]  # the start says enough; never the repr of megabytes
    return f"{type(value).__name__} {value!r}"[:120]

"""Protobuf text format (Triton's ``config.pbtxt``) written from values, every one escaped or refused.

A message is a dict: a ``str`` is written as a quoted string literal, escaped as protobuf's own writer does
(protocolbuffers/protobuf@v33.6:python/google/protobuf/text_encoding.py:14-25: ``"`` and ``\\`` always, tab,
newline and carriage return by name, every other byte outside printable ASCII as ``\\ooo``; the grammar is
https://protobuf.dev/reference/protobuf/textformat-spec/ "String Literals"), so no value can end its literal;
an :class:`Enum` is an identifier; ints and bools as themselves; a dict is a message, a list a repeated field.
Field names and enum values that are not identifiers are refused.
"""

from __future__ import annotations

import re
from typing import Any

from kftrain.errors import KftrainError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("'"): "\\'", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


class PbtxtError(KftrainError):
    """A value that protobuf text format cannot hold where it is written (a field or enum name)."""


class Enum(str):
    """An enum value, written bare (``TYPE_FP32``): it must be an identifier."""


def quoted(text: str) -> str:
    """``text`` as a protobuf text-format string literal (UTF-8, escaped to printable ASCII)."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in _ESCAPES:
            out.append(_ESCAPES[byte])
        elif 32 <= byte < 127:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _identifier(name: str, what: str) -> str:
    if not IDENTIFIER.match(name):
        raise PbtxtError(f"{what} {name!r} is not an identifier: protobuf text format cannot hold it")
    return name


def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return _identifier(value, "enum value")
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise PbtxtError(f"{value!r} ({type(value).__name__}) is not a value this writer takes")


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + _fields(value) + " }"
    if isinstance(value, list):
        return "[ " + ", ".join(_value(v) for v in value) + " ]" if value else "[ ]"
    return _scalar(value)


def _fields(message: dict[str, Any]) -> str:
    return " ".join(f"{_identifier(name, 'field name')}: {_value(v)}" for name, v in message.items())


def render(message: dict[str, Any]) -> str:
    """``message`` as protobuf text format: a top-level field a line, a repeated message one element a line, and
    nested messages inline."""
    lines = []
    for name, value in message.items():
        field = _identifier(name, "field name")
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = ",\n".join(f"  {{ {_fields(v)} }}" for v in value)
            lines.append(f"{field} [\n{items}\n]\n")
        else:
            lines.append(f"{field}: {_value(value)}\n")
    return "".join(lines)

"""A task's trigger condition, evaluated as KFP's driver evaluates it (a CEL expression over the task's inputs).

The driver evaluates ``triggerPolicy.condition`` with CEL against the resolved executor input
(kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go:287-294, ``expr.Condition``;
backend/src/v2/expression). The KFP SDK writes conditions as ``inputs.parameter_values['name'] <op> literal``
joined with ``&&``, ``||`` and ``!( ... )``; that subset is evaluated here, and anything else is an error
(so a condition outside it shows up rather than being guessed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<param>inputs\.parameter_values\['(?P<name>[^']+)'\])|(?P<str>'(?:[^'\\]|\\.)*')"
    r"|(?P<num>-?\d+(?:\.\d+)?)|(?P<kw>true|false|null)|(?P<op>==|!=|<=|>=|<|>|&&|\|\||!|\(|\)))"
)


def evaluate(condition: str, parameters: dict[str, Any]) -> bool:
    tokens = _tokenize(condition)
    value, rest = _or(tokens, parameters)
    if rest:
        raise ValueError(f"condition {condition!r}: unexpected {rest[0]!r}")
    if not isinstance(value, bool):
        raise ValueError(f"condition {condition!r} is not a boolean")
    return value


def _tokenize(text: str) -> list[tuple[str, Any]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"condition {text!r}: cannot read {text[pos:]!r}")
        pos = match.end()
        if match.group("param"):
            out.append(("param", match.group("name")))
        elif match.group("str"):
            out.append(("lit", json.loads('"' + match.group("str")[1:-1].replace('"', '\\"') + '"')))
        elif match.group("num"):
            out.append(("lit", float(match.group("num"))))
        elif match.group("kw"):
            out.append(("lit", {"true": True, "false": False, "null": None}[match.group("kw")]))
        else:
            out.append(("op", match.group("op")))
    return out


def _or(tokens: list[tuple[str, Any]], params: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
    return _chain(tokens, params, "||", _and, lambda left, right: bool(left) or bool(right))


def _and(tokens: list[tuple[str, Any]], params: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
    return _chain(tokens, params, "&&", _compare, lambda left, right: bool(left) and bool(right))


def _chain(
    tokens: list[tuple[str, Any]],
    params: dict[str, Any],
    op: str,
    operand: Callable[[list[tuple[str, Any]], dict[str, Any]], tuple[Any, list[tuple[str, Any]]]],
    combine: Callable[[Any, Any], Any],
) -> tuple[Any, list[tuple[str, Any]]]:
    """Operands of one precedence level joined by ``op``, left to right (each operand evaluated: no short cut)."""
    left, tokens = operand(tokens, params)
    while tokens and tokens[0] == ("op", op):
        right, tokens = operand(tokens[1:], params)
        left = combine(left, right)
    return left, tokens


def _compare(tokens: list[tuple[str, Any]], params: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
    left, tokens = _unary(tokens, params)
    if tokens and tokens[0][0] == "op" and tokens[0][1] in ("==", "!=", "<", ">", "<=", ">="):
        op = tokens[0][1]
        right, tokens = _unary(tokens[1:], params)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)) and not isinstance(left, bool):
            left, right = float(left), float(right)
        result = {
            "==": lambda: left == right,
            "!=": lambda: left != right,
            "<": lambda: left < right,
            ">": lambda: left > right,
            "<=": lambda: left <= right,
            ">=": lambda: left >= right,
        }[op]()
        return result, tokens
    return left, tokens


def _unary(tokens: list[tuple[str, Any]], params: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
    if not tokens:
        raise ValueError("condition ends too early")
    kind, value = tokens[0]
    if (kind, value) == ("op", "!"):
        inner, rest = _unary(tokens[1:], params)
        return not inner, rest
    if (kind, value) == ("op", "("):
        inner, rest = _or(tokens[1:], params)
        if not rest or rest[0] != ("op", ")"):
            raise ValueError("condition: unbalanced parentheses")
        return inner, rest[1:]
    if kind == "param":
        if value not in params:
            raise ValueError(f"condition reads inputs.parameter_values[{value!r}], which the task does not have")
        return params[value], tokens[1:]
    if kind == "lit":
        return value, tokens[1:]
    raise ValueError(f"condition: unexpected {value!r}")

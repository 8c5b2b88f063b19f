"""The metrics contract: how a training program reports its curves to the launch step, on any backend.

A program prints one line per point, ``KFTRAIN_METRICS {"epoch": 3, "loss": 0.41}`` (``epoch`` or ``step`` the
x-axis, every other number a curve), and may say once how far the x-axis goes, ``KFTRAIN_METRICS_TOTAL {"epoch":
20}``, for ``epoch 3/20`` and an ETA. Any language, no kftrain import; an invalid line is just a log line. Print each
line whole in one write and flush (under ``mpirun`` ranks share one output). Names are shown with unprintable
characters as ``?``, cut at :data:`MAX_NAME`. This module is the optional Python helper (standard library only):
``report_total(epoch=20)``, ``report(epoch=3, loss=0.41)``.
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Any

MARKER = "KFTRAIN_METRICS"
TOTAL_MARKER = "KFTRAIN_METRICS_TOTAL"
X_AXES = ("epoch", "step")  # the x-axis keys, in order of preference (as metrics.jsonl's)
MAX_NAME = 200


def clean_name(name: object) -> str:
    """``name`` as it may be shown: every character that is not printable replaced by ``?``, cut at
    :data:`MAX_NAME` characters."""
    text = str(name)
    if len(text) > MAX_NAME:
        text = text[: MAX_NAME - 3] + "..."
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of ``values`` (bools and NaN are not curves), by :func:`clean_name`."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            try:
                number = float(v)
            except OverflowError:  # an integer beyond a float's range (JSON allows 1e400 as an int literal)
                continue
            if math.isfinite(number):
                out[clean_name(k)] = number
    return out


def write_line(values: dict[str, Any], *, total: bool = False, stream: IO[str] | None = None) -> None:
    """Print ``values`` as one contract line (a point, or with ``total`` how far the x-axis goes)."""
    out = stream if stream is not None else sys.stdout
    marker = TOTAL_MARKER if total else MARKER
    point = {k: (int(v) if k in X_AXES and float(v).is_integer() else v) for k, v in _numbers(values).items()}
    # One write of the whole line, then a flush: another rank's text must not land inside it.
    out.write(f"{marker} {json.dumps(point, separators=(',', ':'))}\n")
    out.flush()


def report(**values: float) -> None:
    """Print one point (``epoch=3, loss=0.41``) as a ``KFTRAIN_METRICS`` line on standard output."""
    write_line(values)


def report_total(**totals: float) -> None:
    """Print how far the x-axis goes (``epoch=20``) as a ``KFTRAIN_METRICS_TOTAL`` line on standard output."""
    write_line(totals, total=True)


def parse_line(line: str) -> tuple[str, dict[str, float]] | None:
    """``("point" | "total", numbers)`` for a contract line (anywhere after a prefix, e.g. a log format's);
    None for any other line, or a marker followed by anything but a JSON object with numbers."""
    at = line.find(MARKER)
    if at < 0:
        return None
    rest = line[at + len(MARKER) :]
    kind = "point"
    if rest.startswith("_TOTAL"):
        kind, rest = "total", rest[len("_TOTAL") :]
    if not rest.startswith((" ", "\t")):
        return None
    try:
        obj = json.loads(rest)
    except (ValueError, RecursionError):  # RecursionError: brackets nested deeper than the parser goes
        return None
    if not isinstance(obj, dict):
        return None
    numbers = _numbers(obj)
    return (kind, numbers) if numbers else None


def x_axis(point: dict[str, float]) -> str:
    """The x-axis key of ``point`` (``epoch`` before ``step``), or "" when it has neither."""
    return next((k for k in X_AXES if k in point), "")

"""The argparse types of every numeric option: a finite number (or a whole one) within the option's range.

argparse names the option in its error (``argument --poll-seconds: ...``); the type says what was expected, so
``-1``, ``nan``, ``inf`` and ``1e20`` are refused where they are typed, not where they are used.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

INT64_MAX = 2**63 - 1  # KFP's API fields (interval_second) and Go's int64
# The longest wait a duration option takes (about 68 years): what time.sleep and a deadline can hold.
MAX_SECONDS = float(2**31)


def number(what: str, *, above: float | None = None, low: float | None = None, high: float) -> Callable[[str], float]:
    """A finite number ``> above`` (or ``>= low``) and ``<= high``; ``what`` names its unit in the error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {what}") from None
        too_low = (above is not None and value <= above) or (low is not None and value < low)
        if not math.isfinite(value) or too_low or value > high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of {what} {_range(above, low, high)}")
        return value

    return parse


def whole(what: str, *, low: int, high: int = INT64_MAX) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high`` (written as digits: ``1e3`` and ``2.0`` are refused)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of {what} from {low} to {high}")
        return value

    return parse


def _range(above: float | None, low: float | None, high: float) -> str:
    start = f"above {above:g}" if above is not None else f"from {low:g}"
    return f"{start} to {high:g}"


seconds = number("seconds", above=0, high=MAX_SECONDS)  # a wait or a deadline

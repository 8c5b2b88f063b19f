"""When a recurring run runs: KFP cron expressions, RFC 3339 times and the trigger options, checked locally.

KFP's scheduler uses robfig/cron with a seconds field: 6 fields (second minute hour day-of-month
month day-of-week), ``*`` / ``?`` / ranges / steps / lists, month and day names. Every check here runs
before the first request, so a bad schedule uploads nothing; each error names the field that is wrong.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from kftrain.errors import KftrainError

MAX_CONCURRENCY_RANGE = (1, 10)  # what the KFP API server accepts

_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# (name, low, high, names mapped to numbers)
_CRON_FIELDS: list[tuple[str, int, int, dict[str, int]]] = [
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day-of-week", 0, 6, {d: i for i, d in enumerate(_DAYS)}),
]
_CRON_PART = re.compile(r"^(?P<range>\*|\?|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/(?P<step>[0-9]+))?$")


def validate_cron(expr: str) -> str:
    """Check a KFP cron expression (6 fields, seconds first, robfig/cron syntax); return it normalized.

    Raises :class:`KftrainError` naming the field that is wrong, before anything talks to the server.
    """
    fields = expr.split()
    if len(fields) != 6:
        hint = ""
        if len(fields) == 5:
            hint = f"; a 5-field crontab needs a seconds field first: '0 {' '.join(fields)}'"
        raise KftrainError(
            f"--cron {expr!r}: KFP cron needs 6 fields (second minute hour day-of-month month day-of-week), "
            f"got {len(fields)}{hint}"
        )
    for value, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in value.split(","):
            match = _CRON_PART.match(part)
            if not match:
                raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: cannot parse {part!r}")
            bounds = match["range"]
            if bounds not in ("*", "?"):
                ends = [_cron_number(expr, name, b, low, high, names) for b in bounds.split("-")]
                if len(ends) == 2 and ends[0] > ends[1]:
                    raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: range {bounds} is backwards")
            if match["step"] is not None and int(match["step"]) == 0:
                raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: step must be > 0")
    return " ".join(fields)


def _cron_number(expr: str, name: str, text: str, low: int, high: int, names: Mapping[str, int]) -> int:
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        raise KftrainError(f"--cron {expr!r}: {name} field: {text!r} is not a number or name")
    number = int(text)
    if not low <= number <= high:
        raise KftrainError(f"--cron {expr!r}: {name} field: {number} is outside {low}-{high}")
    return number


def validate_time(flag: str, text: str | None) -> str | None:
    """An RFC 3339 time (``2026-01-31T03:00:00Z``) as the server wants it, or None."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise KftrainError(f"{flag} {text!r}: expected an RFC 3339 time such as 2026-01-31T03:00:00Z") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ScheduleSpec:
    """A recurring run's trigger (a cron expression or an interval), its window and how many runs at once."""

    cron: str | None
    interval_seconds: int | None
    max_concurrency: int
    start: str | None  # RFC 3339, UTC
    end: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ScheduleSpec:
        """The ``schedule create`` options, each checked; the first wrong one raises :class:`KftrainError`."""
        cron = validate_cron(args.cron) if args.cron is not None else None
        if args.interval_seconds is not None and args.interval_seconds <= 0:
            raise KftrainError(f"--interval-seconds {args.interval_seconds}: must be > 0")
        low, high = MAX_CONCURRENCY_RANGE
        if not low <= args.max_concurrency <= high:
            raise KftrainError(f"--max-concurrency {args.max_concurrency}: KFP accepts {low} to {high}")
        start = validate_time("--start", args.start)
        end = validate_time("--end", args.end)
        if start and end and end <= start:
            raise KftrainError(f"--end {args.end} is not after --start {args.start}")
        return cls(
            cron=cron,
            interval_seconds=args.interval_seconds,
            max_concurrency=args.max_concurrency,
            start=start,
            end=end,
        )

    def describe(self) -> str:
        return f"cron {self.cron!r}" if self.cron else f"every {self.interval_seconds}s"

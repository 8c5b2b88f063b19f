"""When a recurring run runs: KFP cron expressions, RFC 3339 times and the trigger options, checked locally.

KFP's scheduler uses robfig/cron with a seconds field: 6 fields (second minute hour day-of-month
month day-of-week), ``*`` / ``?`` / ranges / steps / lists, month and day names. Every check here runs
before the first request, so a bad schedule uploads nothing; each error names the field that is wrong. The
server only parses a cron (kubeflow/pipelines@2.17.0:backend/src/apiserver/server/api_converter.go:2088): a
schedule that can never fire (31 February, an end already past) is refused here.
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
    parsed = [_cron_field(expr, value, *field) for value, field in zip(fields, _CRON_FIELDS, strict=True)]
    (days, _), (months, _), (_, any_weekday) = parsed[3:]
    # robfig/cron@v1.2.0:spec.go:149 (dayMatches): with a day-of-week of * or ?, a time fires only on a listed day
    # of the month; spec.go:70: Next gives up after five years, and KFP then schedules nothing.
    if any_weekday and not any(day <= _DAYS_IN[month - 1] for day in days for month in months):
        raise KftrainError(
            f"--cron {expr!r}: no month of {fields[4]!r} has a day {fields[3]!r}: the schedule would never run"
        )
    return " ".join(fields)


_DAYS_IN = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def _cron_field(
    expr: str, value: str, name: str, low: int, high: int, names: Mapping[str, int]
) -> tuple[set[int], bool]:
    """The values a field matches, and whether it has a ``*`` or ``?`` part (robfig/cron@v1.2.0:parser.go:220
    marks those, a step too)."""
    found: set[int] = set()
    starred = False
    for part in value.split(","):
        match = _CRON_PART.match(part)
        if not match:
            raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: cannot parse {part!r}")
        bounds = match["range"]
        step = int(match["step"]) if match["step"] is not None else 1
        if step == 0:
            raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: step must be > 0")
        if bounds in ("*", "?"):
            starred, start, end = True, low, high
        else:
            ends = [_cron_number(expr, name, b, low, high, names) for b in bounds.split("-")]
            if len(ends) == 2 and ends[0] > ends[1]:
                raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: range {bounds} is backwards")
            # "N/step" is N to the field's end (robfig/cron@v1.2.0:parser.go:249).
            start, end = ends[0], ends[-1] if len(ends) == 2 or match["step"] is None else high
        found.update(range(start, end + 1, step))
    return found, starred


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


def _parsed(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _check_first_run(interval: int, begin: datetime, end: str | None) -> None:
    """The first run (``begin`` plus the interval, as kubeflow/pipelines@2.17.0:backend/src/crd/controller/
    scheduledworkflow/util/periodic_schedule.go:60 adds them) comes before ``end`` and the year 9999."""
    last = _parsed(end) if end else datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    if interval > (last - begin).total_seconds():
        until = f"--end {end}" if end else "the year 9999"
        raise KftrainError(f"--interval-seconds {interval}: the first run would come after {until}; it would never run")


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
        low, high = MAX_CONCURRENCY_RANGE
        if not low <= args.max_concurrency <= high:
            raise KftrainError(f"--max-concurrency {args.max_concurrency}: KFP accepts {low} to {high}")
        start = validate_time("--start", args.start)
        end = validate_time("--end", args.end)
        if start and end and end <= start:
            raise KftrainError(f"--end {args.end} is not after --start {args.start}")
        now = datetime.now(timezone.utc)
        if end and _parsed(end) <= now:
            raise KftrainError(f"--end {args.end} is already past: the schedule would never run")
        if args.interval_seconds is not None:
            _check_first_run(args.interval_seconds, max(now, _parsed(start)) if start else now, end)
        return cls(
            cron=cron,
            interval_seconds=args.interval_seconds,
            max_concurrency=args.max_concurrency,
            start=start,
            end=end,
        )

    def describe(self) -> str:
        return f"cron {self.cron!r}" if self.cron else f"every {self.interval_seconds}s"

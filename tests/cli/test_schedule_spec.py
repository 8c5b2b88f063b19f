"""A recurring run that can never fire is refused before anything is sent: a cron on a day no listed month has
(robfig/cron's day-of-month and day-of-week rule), an end already past, an interval whose first run comes after the
end or past the year 9999."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from kftrain.cli.kfp.schedule_spec import ScheduleSpec, validate_cron
from kftrain.errors import KftrainError

NEVER = {
    "31-february": "0 0 0 31 2 *",
    "30-february-question-mark": "0 0 0 30 FEB ?",
    "31-april-june-september-november": "0 0 0 31 4,6,9,11 *",
    "31-from-a-step-in-short-months": "0 0 0 31/1 2 *",
    "31-with-a-starred-step-day-of-week": "0 0 0 31 2 */2",
}
# Fires: a day-of-week that is not * or ? is OR'ed with the day of month (robfig/cron@v1.2.0:spec.go:149).
FIRES = ["0 0 0 29 2 *", "0 0 0 31 2 MON", "0 0 0 30,31 2,3 *", "0 0 0 */2 2 *", "0 0 0 31 * *", "0 0 0 1-31 2 *"]


@pytest.mark.parametrize("case", list(NEVER))
def test_a_cron_that_never_fires_is_refused(case: str) -> None:
    with pytest.raises(KftrainError, match="the schedule would never run"):
        validate_cron(NEVER[case])


@pytest.mark.parametrize("cron", FIRES)
def test_a_cron_that_fires_is_kept(cron: str) -> None:
    assert validate_cron(cron) == cron


def _args(**given: object) -> argparse.Namespace:
    base: dict[str, object] = {"cron": None, "interval_seconds": None, "max_concurrency": 1, "start": None, "end": None}
    return argparse.Namespace(**{**base, **given})


SOON = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
WINDOWS = {
    "end-in-1900": (
        {"cron": "0 0 3 * * *", "end": "1900-01-01T00:00:00Z"},
        "--end 1900-01-01T00:00:00Z is already past",
    ),
    "end-in-1900-interval": ({"interval_seconds": 60, "end": "1900-01-01T00:00:00Z"}, "already past"),
    "interval-after-end": ({"interval_seconds": 7 * 86400, "end": SOON}, f"first run would come after --end {SOON}"),
    "interval-past-9999": ({"interval_seconds": 2**62}, "first run would come after the year 9999"),
    "interval-after-end-from-start": (
        {"interval_seconds": 3600, "start": "2096-01-01T00:00:00Z", "end": "2096-01-01T00:30:00Z"},
        "first run would come after --end",
    ),
}


@pytest.mark.parametrize("case", list(WINDOWS))
def test_a_window_with_no_run_in_it_is_refused(case: str) -> None:
    given, message = WINDOWS[case]
    with pytest.raises(KftrainError, match=message.replace("-", r"\-")):
        ScheduleSpec.from_args(_args(**given))


def test_a_window_with_runs_in_it_is_kept() -> None:
    spec = ScheduleSpec.from_args(_args(interval_seconds=3600, end=SOON))
    assert (spec.interval_seconds, spec.end) == (3600, SOON)

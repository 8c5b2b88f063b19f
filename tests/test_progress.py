"""The rate-limited progress reporter, on a fake clock."""

from __future__ import annotations

import io

import pytest

from kftrain.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(total: int | None, every: float = 5.0) -> tuple[Progress, Clock, io.StringIO]:
    clock, stream = Clock(), io.StringIO()
    return Progress(total, "shards", every_seconds=every, stream=stream, clock=clock), clock, stream


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_reports_at_most_once_per_interval_and_at_the_end() -> None:
    progress, clock, stream = make(800)
    for _ in range(80):  # 80 units per second for 10 s, 10 at a time every 0.125 s (exact in binary)
        clock.now += 0.125
        progress.update(10)
    assert lines(stream) == [
        "shards: 50% (400/800) 80.0/s eta 5s",
        "shards: 100% (800/800) 80.0/s in 10s",
    ]
    progress.close()  # the total was already reported: nothing more
    assert len(lines(stream)) == 2


def test_the_documented_line() -> None:
    progress, clock, _ = make(1000)
    clock.now += 400 / 123.4
    progress.done = 400
    assert progress.line() == "shards: 40% (400/1000) 123.4/s eta 5s"


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (4.6, "5s"), (59, "59s"), (125, "2m05s"), (3720, "1h02m"), (-3, "0s")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_nothing_before_the_first_interval_then_close_reports() -> None:
    progress, clock, stream = make(100)
    clock.now += 1
    progress.update(3)
    assert stream.getvalue() == ""
    clock.now += 1
    progress.close()
    assert lines(stream) == ["shards: 3% (3/100) 1.5/s eta 1m05s"]


def test_unknown_total() -> None:
    progress, clock, stream = make(None, every=1)
    clock.now += 2
    progress.update(50)
    with progress:
        clock.now += 2
        progress.update(30)
        clock.now += 0.5
        progress.update(10)
    assert lines(stream) == ["shards: 50 25.0/s", "shards: 80 20.0/s", "shards: 90 20.0/s"]


def test_no_rate_yet_and_empty_total() -> None:
    progress, _, _ = make(10)
    assert progress.line() == "shards: 0% (0/10) 0.0/s eta ?"
    assert progress.rate == 0.0
    empty, _, stream = make(0)
    empty.close()
    assert lines(stream) == ["shards: 100% (0/0) 0.0/s in 0s"]


def test_every_zero_reports_every_update() -> None:
    progress, clock, stream = make(3, every=0)
    for _ in range(3):
        clock.now += 1
        progress.update()
    assert len(lines(stream)) == 3


def test_defaults_to_stderr(capsys: pytest.CaptureFixture) -> None:
    progress = Progress(2, "files")
    progress.update(2)
    assert capsys.readouterr().err.startswith("files: 100% (2/2)")


@pytest.mark.parametrize(("total", "every"), [(-1, 5.0), (1, -1.0)])
def test_rejects_bad_arguments(total: int, every: float) -> None:
    with pytest.raises(ValueError):
        Progress(total, "x", every_seconds=every)

"""The launch step's side of the metrics contract: points collected from every replica's output as the job runs.

:class:`Collector` is fed every replica's lines (any thread) and a TrainJob's ``status.trainerStatus``
(:meth:`feed_status`, the series ``trainer-status``); at most every ``every_s`` it writes a progress line for the
replica furthest along: ``progress: epoch 3/20 loss 0.4123 | 0.52 epoch/s eta 33s (master-0)``. :meth:`groups` draws
replicas that reported the same points once. Memory is bounded: past :data:`MAX_POINTS` a replica's most frequent
kind is thinned to every other point (a curve keeps its length), names stop at :data:`MAX_NAMES`, each said once.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kftrain.metrics import X_AXES, parse_line, x_axis
from kftrain.progress import format_duration

# How many curves the progress line shows after the x-axis: loss first, then in the order reported.
_SHOWN = 3
MAX_POINTS = 10_000  # kept per replica
MAX_NAMES = 1_000  # distinct names kept, all replicas together
MAX_KINDS = 100  # distinct sets of names per replica thinned apart; the rest together

Point = dict[str, float]
# The series of what the nodes report to Kubeflow Trainer's status server (status.trainerStatus).
STATUS_SERIES = "trainer-status"
PROGRESS_METRIC = "progress_percentage"


def status_point(status: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a ``trainerStatus`` (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go:561-605):
    each metric whose value reads as a finite number, and the progress percentage."""
    point: dict[str, float] = {}
    for metric in status.get("metrics") or []:
        try:
            value = float(str(metric.get("value")))
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and metric.get("name"):
            point[str(metric["name"])] = value
    if isinstance(status.get("progressPercentage"), int | float):
        point[PROGRESS_METRIC] = float(status["progressPercentage"])
    return point


@dataclass
class _Series:
    points: list[Point] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # when each point arrived
    last: Point | None = None  # the last point reported, kept or not
    last_time: float = 0.0
    seen: dict[tuple[str, ...], int] = field(default_factory=dict)  # points reported, per kind (set of names)
    stride: dict[tuple[str, ...], int] = field(default_factory=dict)  # of a kind, every stride-th point is kept
    kept: dict[tuple[str, ...], int] = field(default_factory=dict)
    last_of: dict[tuple[str, ...], tuple[int, Point]] = field(default_factory=dict)  # kind -> (arrival, point)
    # Per x-axis: (when, value) of the first and the last point that had it: the rate, in constant time.
    first_mark: dict[str, tuple[float, float]] = field(default_factory=dict)
    last_mark: dict[str, tuple[float, float]] = field(default_factory=dict)

    def kind(self, point: Point) -> tuple[str, ...]:
        kind = tuple(sorted(point))
        return kind if kind in self.seen or len(self.seen) < MAX_KINDS else ()

    def add(self, point: Point, now: float) -> bool:
        """Keep ``point`` (or not, see the module's docstring); True when the series was thinned."""
        self.last, self.last_time = point, now
        kind = self.kind(point)
        seen = self.seen[kind] = self.seen.get(kind, 0) + 1
        self.last_of[kind] = (sum(self.seen.values()), point)
        for axis in X_AXES:
            if axis in point:
                self.first_mark.setdefault(axis, (now, point[axis]))
                self.last_mark[axis] = (now, point[axis])
        if (seen - 1) % self.stride.get(kind, 1):
            return False
        self.points.append(point)
        self.times.append(now)
        self.kept[kind] = self.kept.get(kind, 0) + 1
        if len(self.points) <= MAX_POINTS:
            return False
        self._thin(max(self.kept, key=lambda k: self.kept[k]))
        return True

    def _thin(self, kind: tuple[str, ...]) -> None:
        """Drop every other kept point of ``kind`` (its 2nd, 4th...): those a doubled stride would not have kept."""
        points, times, n = [], [], 0
        for point, when in zip(self.points, self.times, strict=True):
            if self.kind(point) == kind:
                n += 1
                if n % 2 == 0:
                    continue
            points.append(point)
            times.append(when)
        self.points, self.times = points, times
        self.kept[kind] = (n + 1) // 2
        self.stride[kind] = self.stride.get(kind, 1) * 2

    def curve(self) -> list[Point]:
        """The kept points, and the last point of each kind where it was not kept: every curve ends where it
        ended."""
        kept = {id(point) for point in self.points}
        lasts = sorted((arrival, point) for arrival, point in self.last_of.values() if id(point) not in kept)
        return [*self.points, *(point for _, point in lasts)]


class Collector:
    def __init__(
        self,
        say: Callable[[str], None] | None = None,
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say = say
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}
        self.totals: dict[str, float] = {}
        self._last_said: float | None = None
        self._unsaid = False  # points arrived since the last progress line
        self.lines_said = 0
        self._names: set[str] = set()
        self._limits_said: set[str] = set()
        self._status: Mapping[str, Any] | None = None  # the last trainerStatus fed
        # Called with (series, point) for every point kept by name (``trainer-status`` for the Trainer's), in the
        # order they came, outside the lock: e.g. kftrain.tracking.training logging them to MLflow as they come.
        self.listeners: list[Callable[[str, Point], None]] = []

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, label: str, line: str) -> None:
        """One line of replica ``label``'s output: kept if it is a contract line, else ignored."""
        parsed = parse_line(line)
        if parsed is None:
            return
        kind, numbers = parsed
        notes: list[str] = []
        text = None
        with self._lock:
            now = self._clock()
            numbers = self._known(label, numbers, notes)
            if numbers and kind == "total":
                self.totals.update(numbers)
            elif numbers:
                if self._series.setdefault(label, _Series()).add(numbers, now):
                    self._limit(
                        "points " + label,
                        notes,
                        f"metrics: {label} reported more than {MAX_POINTS} points; every other one of the most "
                        "frequent kind is left out as more come (curves keep their length, at a coarser step)",
                    )
                text = self._due(now)
        if numbers and kind != "total":
            self._tell(label, numbers)
        for note in [*notes, *([text] if text is not None else [])]:
            self._emit(note)

    def feed_status(self, status: Mapping[str, Any]) -> None:
        """A ``trainerStatus`` the job's nodes reported to Kubeflow Trainer (from any thread)."""
        notes: list[str] = []
        with self._lock:
            now = self._clock()
            self._status = dict(status)
            point = self._known(STATUS_SERIES, status_point(status), notes)
            series = self._series.setdefault(STATUS_SERIES, _Series()) if point else None
            new = series is not None and series.last != point
            if series is not None and new:
                series.add(point, now)
            text = self._due(now)
        if new:
            self._tell(STATUS_SERIES, point)
        for note in [*notes, *([text] if text is not None else [])]:
            self._emit(note)

    def _tell(self, label: str, point: Point) -> None:
        for listener in self.listeners:
            listener(label, point)

    def _due(self, now: float) -> str | None:
        """The progress line when one is due (under the lock): something new came, and ``every_s`` has passed."""
        self._unsaid = True
        if self._last_said is not None and now - self._last_said < self._every_s:
            return None
        text = self._progress(now)
        if text is not None:
            self._last_said, self._unsaid = now, False
        return text

    def _known(self, label: str, numbers: Point, notes: list[str]) -> Point:
        """``numbers`` without names past the first :data:`MAX_NAMES` (said once)."""
        new = [name for name in numbers if name not in self._names]
        if not new:
            return numbers
        room = MAX_NAMES - len(self._names)
        self._names.update(new[: max(room, 0)])
        if len(new) <= room:
            return numbers
        self._limit(
            "names",
            notes,
            f"metrics: {label} reported more than {MAX_NAMES} distinct names; later names "
            f"(such as {new[max(room, 0)]!r}) are left out",
        )
        return {k: v for k, v in numbers.items() if k in self._names}

    def _limit(self, which: str, notes: list[str], text: str) -> None:
        if which not in self._limits_said:
            self._limits_said.add(which)
            notes.append(text)

    def close(self) -> None:
        """Say the last progress once more if points arrived after the last line."""
        with self._lock:
            text = self._progress(self._clock()) if self._unsaid else None
            self._unsaid = False
        if text is not None:
            self._emit(text)

    def _emit(self, text: str) -> None:
        self.lines_said += 1
        if self._say is not None:
            self._say(text)

    # -- the progress line -----------------------------------------------------------------------

    def _lead(self) -> str | None:
        """The replica furthest along its x-axis (the first by name among equals)."""

        def position(label: str) -> float:
            last = self._series[label].last or {}
            axis = x_axis(last)
            return last[axis] if axis else float(len(self._series[label].points))

        # The Trainer's status is shown beside the replicas' own points, and is the lead only without them.
        labels = sorted(label for label in self._series if label != STATUS_SERIES)
        if not labels:
            return STATUS_SERIES if STATUS_SERIES in self._series else None
        return max(labels, key=position)  # max keeps the first of equals

    def _progress(self, now: float) -> str | None:
        label = self._lead()
        if label is None:
            return self._status_only()
        if label == STATUS_SERIES:
            return self._status_line()
        text = self._replica_line(label)
        status = self._status_summary()
        return f"{text} | trainer status {status}" if status else text

    def _status_summary(self) -> str:
        """``45% eta 1h00m`` from the last trainerStatus; "" when it said neither."""
        status = self._status or {}
        parts = []
        if isinstance(status.get("progressPercentage"), int | float):
            parts.append(f"{_num(float(status['progressPercentage']))}%")
        if isinstance(status.get("estimatedRemainingSeconds"), int | float):
            parts.append(f"eta {format_duration(float(status['estimatedRemainingSeconds']))}")
        return " ".join(parts)

    def _status_line(self) -> str:
        status = self._status or {}
        last = self._series[STATUS_SERIES].last or {}
        parts = ["progress:"]
        if isinstance(status.get("progressPercentage"), int | float):
            parts.append(f"{_num(float(status['progressPercentage']))}%")
        axis = x_axis(last)
        if axis:  # a metric named epoch or step (Hugging Face's callback reports the epoch)
            parts.append(f"{axis} {_num(last[axis])}")
        parts += [f"{k} {last[k]:.4g}" for k in _curve_names([last]) if k != PROGRESS_METRIC][:_SHOWN]
        text = " ".join(parts)
        if isinstance(status.get("estimatedRemainingSeconds"), int | float):
            text += f" | eta {format_duration(float(status['estimatedRemainingSeconds']))}"
        return f"{text} (trainer status)"

    def _status_only(self) -> str | None:
        """A trainerStatus without a number (only an ETA, say)."""
        summary = self._status_summary()
        return f"progress: {summary} (trainer status)" if summary else None

    def _replica_line(self, label: str) -> str:
        series = self._series[label]
        last = series.last or {}
        axis = x_axis(last)
        parts = ["progress:"]
        if axis:
            total = self.totals.get(axis)
            parts.append(f"{axis} {_num(last[axis])}" + (f"/{_num(total)}" if total is not None else ""))
        parts += [f"{k} {last[k]:.4g}" for k in _curve_names([last])[:_SHOWN]]
        text = " ".join(parts)
        rate = self._rate(series, axis)
        if rate:
            text += f" | {rate:.3g} {axis}/s"
            total = self.totals.get(axis)
            if total is not None and total > last[axis]:
                text += f" eta {format_duration((total - last[axis]) / rate)}"
        return f"{text} ({label})"

    @staticmethod
    def _rate(series: _Series, axis: str) -> float:
        """x-axis units per second between the first and last point with that axis; 0 when unknown."""
        first, last = series.first_mark.get(axis), series.last_mark.get(axis)
        if first is None or last is None or last[0] <= first[0]:
            return 0.0
        return max(0.0, (last[1] - first[1]) / (last[0] - first[0]))

    # -- what remains at the end -----------------------------------------------------------------

    def series(self) -> dict[str, list[dict[str, float]]]:
        with self._lock:
            return {label: s.curve() for label, s in sorted(self._series.items())}

    def groups(self) -> dict[str, list[dict[str, float]]]:
        """The distinct series, each named by the replicas that reported it (``master-0, worker-0``)."""
        merged: dict[str, tuple[list[str], list[dict[str, float]]]] = {}
        for label, points in self.series().items():
            key = repr(points)
            merged.setdefault(key, ([], points))[0].append(label)
        return {", ".join(labels): points for labels, points in merged.values()}

    def final_values(self) -> dict[str, float]:
        """The lead replica's last point, plus ``<name>.<replica>`` where another replica ended elsewhere."""
        with self._lock:
            lead = self._lead()
            if lead is None:
                return {}
            finals = {label: s.last or {} for label, s in self._series.items()}
        values = dict(finals[lead])
        for label, last in sorted(finals.items()):
            for name, value in last.items():
                if label == STATUS_SERIES and name not in values:
                    values[name] = value  # what only the Trainer's status reported keeps its own name
                elif label != lead and values.get(name) != value and name not in X_AXES:
                    values[f"{name}.{label}"] = value
        return values


def curve_names(points: list[dict[str, float]]) -> list[str]:
    """Every curve in ``points`` (not the x-axes): ``loss`` first, then in the order first reported."""
    return _curve_names(points)


def _curve_names(points: list[dict[str, float]]) -> list[str]:
    names: dict[str, None] = {}  # in the order first reported; linear in the points and names
    for point in points:
        names.update((k, None) for k in point if k not in X_AXES)
    order = {name: i for i, name in enumerate(names)}
    return sorted(names, key=lambda n: (n != "loss", order[n]))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"

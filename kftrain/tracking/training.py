"""The launch step's MLflow logging: the job's identity when it starts, every point its replicas report while it
runs (one background thread, a batch a second at most, so a slow server never slows the replicas' logs).

A point's curve is ``curves/<name>`` (another replica's ``curves/<name>.<replica>``, the Trainer's status
``curves/<name>``), stepped by its whole ``epoch`` or ``step``, else its rank in the series. The final values are
the step's Metrics output, which KFP's launcher logs under their own names at step 0 when the task ends
(kubeflow/pipelines@2.17.0:backend/src/v2/common/plugins/mlflow/handler.go:205-211, mapToMetrics: no Step, no
Timestamp): under a curve's name that point would start every chart by step at the last value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from kftrain.job import PodSettings, TrainingJob
from kftrain.metrics import X_AXES, x_axis
from kftrain.metrics.collect import STATUS_SERIES, Collector
from kftrain.tracking.calls import describe
from kftrain.tracking.client import MAX_METRICS_PER_BATCH, TaskRun

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 1.0
CLOSE_TIMEOUT_S = 10.0
MAX_QUEUED = 100_000  # points waiting to be logged; past that, new ones are dropped (and that is said once)
CURVES = "curves/"


class TrainingTracker:
    """Logs a job's points into the task's run as they come (see the module's docstring)."""

    def __init__(self, run: TaskRun, *, flush_every_s: float = FLUSH_EVERY_S) -> None:
        self.run = run
        self._flush_every_s = flush_every_s
        # Points, then None to end; a tick (no item within a second) flushes what was gathered.
        self._queue: queue.Queue[tuple[str, float, int] | None] = queue.Queue(maxsize=MAX_QUEUED)
        self._lock = threading.Lock()
        self._primary = ""  # the first replica that reported: its curves keep their own names
        self._names: set[str] = set()  # names a replica logged under their own name
        self._counts: dict[str, int] = {}  # points per series, the step of a point without a whole x-axis
        self.logged = 0
        self._warned = False
        self._thread = threading.Thread(target=self._loop, name="mlflow metrics", daemon=True)
        self._thread.start()

    def point(self, label: str, point: Mapping[str, float]) -> None:
        """One point of series ``label`` (a Collector listener: any thread)."""
        with self._lock:
            rank = self._counts.get(label, 0)
            self._counts[label] = rank + 1
            axis = x_axis(dict(point))
            step = int(point[axis]) if axis and float(point[axis]).is_integer() else rank
            items = []
            for name, value in point.items():
                if name in X_AXES:
                    continue
                key = self._key(label, name)
                items.append((key, value, step))
        for item in items:
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self._warn(f"more than {MAX_QUEUED} points wait to be logged; later ones are left out")
                return

    def _key(self, label: str, name: str) -> str:
        if label == STATUS_SERIES:
            return f"{CURVES}{name}.{STATUS_SERIES}" if name in self._names else CURVES + name
        if not self._primary:
            self._primary = label
        if label == self._primary:
            self._names.add(name)
            return CURVES + name
        return f"{CURVES}{name}.{label}"

    def _loop(self) -> None:
        batch: list[tuple[str, float, int]] = []
        due = time.monotonic() + self._flush_every_s
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                item = ("", 0.0, 0)  # a tick
            if item is None:
                self._flush(batch)
                return
            if item[0]:
                batch.append(item)
            if len(batch) >= MAX_METRICS_PER_BATCH or time.monotonic() >= due:
                self._flush(batch)
                batch = []
                due = time.monotonic() + self._flush_every_s

    def _flush(self, batch: list[tuple[str, float, int]]) -> None:
        if not batch:
            return
        try:  # a TaskRun says its own failures; a listener never raises into the collector
            self.logged += self.run.log_metrics(batch)
        except Exception as exc:
            self._warn(f"could not log {len(batch)} points: {describe(exc)}")

    def _warn(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("mlflow: %s (%s); the job goes on, this is said once", text, self.run.where())

    def close(self, final: Mapping[str, float], tags: Mapping[str, Any] | None = None) -> None:
        """Log what is queued and ``tags``, within :data:`CLOSE_TIMEOUT_S`; and ``final`` (under their own names, as
        KFP does) into a run the step made itself: KFP logs none there."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        with contextlib.suppress(queue.Full):  # the thread is stuck on the server: the join below gives up
            self._queue.put(None, timeout=CLOSE_TIMEOUT_S)
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._warn(f"gave up logging what was left after {CLOSE_TIMEOUT_S:.0f}s")
            return
        finals = [(k, v, 0) for k, v in final.items() if k not in X_AXES] if self.run.tracking.owned else []
        try:
            self.logged += self.run.log_metrics(finals) if finals else 0
            if tags:
                self.run.set_tags(tags)
        except Exception as exc:
            self._warn(f"could not log the final values: {describe(exc)}")
        log.info("mlflow: logged %d points to %s", self.logged, self.run.where())


@contextlib.contextmanager
def logged_points(run: TaskRun | None, collector: Collector) -> Iterator[TrainingTracker | None]:
    """Within the block, every point ``collector`` keeps is logged into ``run`` (nothing when ``run`` is None);
    at its end, however it ends, what is left and the final values, and whether the job succeeded."""
    if run is None:
        yield None
        return
    tracker = TrainingTracker(run)
    collector.listeners.append(tracker.point)
    outcome = "failed"
    try:
        yield tracker
        outcome = "succeeded"
    finally:
        collector.listeners.remove(tracker.point)
        tracker.close(collector.final_values(), tags={"kftrain.job.outcome": outcome})


def launch_tags(
    job: TrainingJob, pods: PodSettings, uris: Mapping[str, str], *, run_id: str, task_id: str, backend: str
) -> dict[str, Any]:
    """What the task's run is tagged with when the job starts: the job's identity, where it reads and writes, and
    the platform's pod settings that differ from their defaults (``kftrain.pods.<input>``, lists and maps as JSON).

    Tags, not params: KFP's launcher logs the task's input parameters as params when the task ends
    (kubeflow/pipelines@2.17.0:backend/src/v2/common/plugins/mlflow/handler.go, OnTaskEnd's LogBatch), and MLflow
    refuses a param logged twice with another value."""
    defaults = PodSettings()
    tags: dict[str, Any] = {
        "kftrain.step": "launch",
        "kftrain.job.kind": job.kind,
        "kftrain.job.name": job.name,
        "kftrain.job.api_version": job.api_version,
        "kftrain.job.namespace": job.metadata.namespace or "",
        "kftrain.job.backend": backend,
        "kftrain.run_id": run_id,
        "kftrain.task_id": task_id,
        **{f"kftrain.{name}": uri for name, uri in uris.items()},
    }
    for field in dataclasses.fields(PodSettings):
        value = getattr(pods, field.name)
        if value != getattr(defaults, field.name):
            tags[f"kftrain.pods.{field.name}"] = value
    return tags

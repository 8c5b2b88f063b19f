"""What the launch step keeps of a job besides its model: every replica's log, and the curves it reported.

:class:`JobObserver` spools each replica's lines and feeds them, and a TrainJob's progress reports, to the metrics
:class:`~kftrain.metrics.collect.Collector`. However the job ended, :meth:`JobObserver.finish` writes beside the model
``<model>-logs/<replica>.log`` (one per replica, empty if it printed nothing) and ``<model>-tensorboard/<series>/``,
recorded in the job's annotations (:func:`kftrain.job.naming.stamp_outputs`). Siblings, not inside: the model is an
atomic artifact, and a failed job has none; a model URI with no path of its own is refused before submission
(:func:`kftrain.storage.derived_uri`). A SIGTERM meanwhile finishes the copies under way and skips the rest.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kftrain import storage
from kftrain.backends.base import BackendConfig
from kftrain.backends.console import Console
from kftrain.errors import KftrainError
from kftrain.job import TrainingJob, kind_of
from kftrain.job.naming import stamp_outputs
from kftrain.metrics import x_axis
from kftrain.metrics.collect import Collector
from kftrain.metrics.html import render
from kftrain.metrics.tensorboard import FLOAT32_MAX, event_file_name, scalar_events
from kftrain.signals import Terminated, shielded
from kftrain.storage.io import copy_file, write_once

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
SHOWN_LOGS = 8  # replica logs named in the step's log (a job may have hundreds)


def logs_uri(model_uri: str) -> str:
    return storage.derived_uri(model_uri, "logs")


def tensorboard_uri(model_uri: str) -> str:
    return storage.derived_uri(model_uri, "tensorboard")


@dataclass
class Observation:
    """What :meth:`JobObserver.finish` left: where, and the final metrics."""

    logs: dict[str, str] = field(default_factory=dict)  # replica -> the URI of its log
    tensorboard: str = ""
    final: dict[str, float] = field(default_factory=dict)
    html: str = ""


class JobObserver:
    def __init__(
        self,
        model_uri: str,
        *,
        say: Callable[[str], None],
        progress_every_s: float = 10.0,
        replicas: Sequence[str] = (),
    ) -> None:
        self.model_uri = model_uri
        self.replicas = tuple(replicas)  # the replicas expected to print (each gets a log once any has printed)
        self._say = say
        self.collector = Collector(say, every_s=progress_every_s)
        self._spool = Path(tempfile.mkdtemp(prefix="kftrain-logs-"))
        self._files: dict[str, IO[str]] = {}
        self._lock = threading.Lock()
        self.observation: Observation | None = None

    def sink(self, label: str, line: str) -> None:
        """One replica line (from the backend's reader threads)."""
        with self._lock:
            out = self._files.get(label)
            if out is None:
                out = self._files[label] = (self._spool / f"{_SAFE.sub('_', label)}.log").open(
                    "a", encoding="utf-8", errors="replace"
                )
            out.write(line + "\n")
            out.flush()  # a step killed hard still leaves what was streamed in the spool
        self.collector.feed(label, line)

    def finish(self, title: str, stopped: Callable[[], bool] = lambda: False) -> Observation:
        """Write the logs and event files to storage (once); failures to write are said, never raised. Once
        ``stopped()`` is true (a SIGTERM arrived), what is left is skipped."""
        if self.observation is not None:
            return self.observation
        self.collector.close()
        with self._lock:
            for out in self._files.values():
                out.close()
            labels = sorted({*self._files, *self.replicas}) if self._files else []
            self._files.clear()
        for label in labels:
            (self._spool / f"{_SAFE.sub('_', label)}.log").touch()  # a replica that printed nothing: empty
        seen = Observation(final=self.collector.final_values())
        groups = self.collector.groups()
        try:
            seen.logs = self._upload_logs(labels, stopped)
            if seen.logs:
                shown = ", ".join(f"{x}.log" for x in labels[:SHOWN_LOGS])
                more = f" and {len(labels) - SHOWN_LOGS} more" if len(labels) > SHOWN_LOGS else ""
                self._say(f"replica logs: {logs_uri(self.model_uri)}/ ({shown}{more})")
            if not stopped():
                seen.html = render(groups, title)
            if groups and not stopped():
                seen.tensorboard = self._write_events(groups, stopped)
                if seen.tensorboard:
                    self._say(f"tensorboard: tensorboard --logdir {seen.tensorboard}")
        except (KftrainError, OSError) as exc:
            self._say(f"could not keep the job's logs and curves: {exc}")
        finally:
            shutil.rmtree(self._spool, ignore_errors=True)
        if stopped():
            self._say("stopped keeping the job's logs and curves: the step is being stopped")
        self.observation = seen
        return seen

    def _upload_logs(self, labels: list[str], stopped: Callable[[], bool]) -> dict[str, str]:
        where = {}
        for label in labels:
            if stopped():
                break
            name = f"{_SAFE.sub('_', label)}.log"
            target = storage.join(logs_uri(self.model_uri), name)
            copy_file(str(self._spool / name), target)
            where[label] = target
        return where

    def _write_events(self, groups: dict[str, list[dict[str, float]]], stopped: Callable[[], bool]) -> str:
        root = tensorboard_uri(self.model_uri)
        clamped: set[str] = set()
        for name, points in groups.items():
            if stopped():
                return ""
            axis = x_axis(points[-1]) if points else ""
            run = _SAFE.sub("_", name)  # "master-0, worker-0" -> "master-0_worker-0"
            data = scalar_events(points, axis, clamped=clamped)
            write_once(iter([data]), storage.join(root, run, event_file_name()))
        if clamped:
            names = ", ".join(sorted(clamped)[:5]) + (f" and {len(clamped) - 5} more" if len(clamped) > 5 else "")
            self._say(f"tensorboard: values of {names} beyond float32's range are stored as ±{FLOAT32_MAX:.7g}")
        return root


@contextlib.contextmanager
def observing(
    config: BackendConfig, job: TrainingJob, model_uri: str, progress_every_s: float = 10.0
) -> Iterator[JobObserver]:
    """Observe ``job`` run within the block on ``config``'s backend; keep its logs and curves however it ends.

    The job is stamped with where they are kept before it is submitted; a job of more replicas than the backend
    takes is refused first (naming its count), before they are listed."""
    config.check_replicas(job)
    stamp_outputs(job, model_uri, logs_uri(model_uri))
    observer = JobObserver(
        model_uri,
        say=Console(config.out).say,
        progress_every_s=progress_every_s,
        replicas=[r.label for r in kind_of(job).process_replicas(job)],
    )
    config.line_sinks.append(observer.sink)
    config.progress_sinks.append(observer.collector.feed_status)
    try:
        yield observer
    finally:
        config.line_sinks.remove(observer.sink)
        config.progress_sinks.remove(observer.collector.feed_status)
        # A signal must not cut a log being copied short, but the rest is skipped and the signal honoured.
        with shielded() as received:
            observer.finish(f"{job.kind} {job.name}", stopped=lambda: bool(received))
        if received:
            if received[0] == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(received[0])

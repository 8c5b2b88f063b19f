"""``kftrain run``'s quiet output: one line per step and the training's progress, instead of KFP's dumps.

KFP's local runner prints every step's ``executor_input`` JSON, its whole log and its outputs' reprs (several
hundred lines for one pipeline). :func:`quiet_output` routes this process's standard output and error (file
descriptors 1 and 2, so the steps' subprocesses too) through :class:`QuietFilter`, which writes::

    [kftrain] prepare-dataset: started
    [kftrain] prepare-dataset: finished in 6.4s (dataset)
    [kftrain] pytorchjob-launch: started
    [kftrain]   progress: epoch 6/20 loss 0.1537 val_accuracy 0.9721 | 6.4 epoch/s eta 2s (master-0)
    [kftrain] pytorchjob-launch: finished in 16.5s (model, job, curves, metrics: val_accuracy=0.9888 loss=0.0355)

A warning a step logs (``WARNING ...``: the model does not follow the model contract, a setting ignored) is shown
as it comes, under its step: a quiet run hides noise, never a warning. A step that fails shows its last log lines,
whole. ``kftrain run --verbose`` shows everything, as before.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_PIPELINE_END = re.compile(r"Pipeline '([^']+)' finished with status (\w+)")
_EXECUTOR_OUTPUT = re.compile(r"Wrote executor output file to (\S+?)\.?$")
_SHOWN = ("[kftrain] progress:",)  # step log lines shown as they come
_WARNING = "WARNING "  # a step's own logged warning (kftrain.step's log format: "%(levelname)s %(message)s")
FAILURE_LINES = 40  # how many of a failed step's last lines are shown


class QuietFilter:
    def __init__(self, write: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._write = write
        self._clock = clock
        self._step = ""
        self._started = 0.0
        self._outputs: Path | None = None
        self._recent: collections.deque[str] = collections.deque(maxlen=FAILURE_LINES)

    def feed(self, raw: str) -> None:
        line = _ANSI.sub("", raw.rstrip("\n"))
        if found := _STARTED.search(line):
            self._step, self._started, self._outputs = found.group(1), self._clock(), None
            self._recent.clear()
            self._write(f"[kftrain] {self._step}: started")
        elif found := _FINISHED.search(line):
            step, status = found.groups()
            took = self._clock() - self._started
            if status == "SUCCESS":
                self._write(f"[kftrain] {step}: finished in {took:.1f}s{self._summary()}")
            else:
                self._write(f"[kftrain] {step}: {status} after {took:.1f}s; its last {len(self._recent)} log lines:")
                for kept in self._recent:
                    self._write(f"    {kept}")
        elif found := _PIPELINE_END.search(line):
            if found.group(2) != "SUCCESS":
                self._write(f"[kftrain] pipeline {found.group(1)}: {found.group(2)}")
        else:
            text = line.strip()
            if found := _EXECUTOR_OUTPUT.search(text):
                self._outputs = Path(found.group(1))
            if text.startswith(_SHOWN):
                self._write(f"[kftrain]   {text.removeprefix('[kftrain] ')}")
            elif text.startswith(_WARNING) and self._step:
                self._write(f"[kftrain]   warning: {text.removeprefix(_WARNING)}")
            elif text.startswith(("ERROR", "Traceback")) and not self._step:
                self._write(text)  # outside any step: an error of the runner itself
            if text:
                self._recent.append(text)

    def _summary(self) -> str:
        """`` (model, job, metrics: name=value ...)`` from the step's executor output."""
        try:
            data = json.loads(self._outputs.read_text()) if self._outputs else {}
        except (OSError, ValueError):
            return ""
        names: list[str] = []
        for name, entry in (data.get("artifacts") or {}).items():
            values = [a.get("metadata", {}) for a in entry.get("artifacts", [])] if name == "metrics" else []
            scalars = [f"{k}={v:.4g}" for meta in values for k, v in meta.items() if isinstance(v, int | float)]
            names.append(f"{name}: {' '.join(scalars)}" if scalars else name)
        names += [
            f"{k}={v}" for k, v in (data.get("parameterValues") or {}).items() if isinstance(v, bool | int | float)
        ]
        return f" ({', '.join(names)})" if names else ""


@contextlib.contextmanager
def quiet_output() -> Iterator[None]:
    """Within the block, everything written to file descriptors 1 and 2 passes through a :class:`QuietFilter`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    console = os.fdopen(saved_out, "w", buffering=1, closefd=False)

    def show(text: str) -> None:
        console.write(text + "\n")

    filtered = QuietFilter(show)

    def pump() -> None:
        with os.fdopen(read_end, "r", errors="replace") as lines:
            for line in lines:
                filtered.feed(line)

    reader = threading.Thread(target=pump, name="quiet output", daemon=True)
    reader.start()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)  # the pipe's last writers go: the reader sees its end once the steps have exited
        os.dup2(saved_err, 2)
        reader.join(timeout=10)
        console.flush()
        os.close(saved_out)
        os.close(saved_err)

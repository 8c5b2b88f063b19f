"""``kftrain run``'s output: two lines per step and the training's progress, instead of KFP's dumps.

:func:`quiet_output` routes file descriptors 1 and 2 (the steps' subprocesses too) through :class:`QuietFilter`:
``[kftrain] <step>: started``, ``finished in 6.4s (outputs)``, the progress lines. A step's warnings show as they
come; a failed step shows its own error, from its last ``ERROR`` line (:func:`kftrain.errors.fail_step`) or its last
lines, never KFP's ``executor_input`` dump, and how to read its job's logs. ``--verbose`` shows everything. A path in
the run's temporary folder, removed on return, is printed as :data:`GONE`.
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
from dataclasses import dataclass
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_EXECUTOR_OUTPUT = re.compile(r"Wrote executor output file to (\S+?)\.?$")
_EXECUTOR_INPUT = "Got executor_input:"  # KFP's executor logs this, then the JSON over many lines
_KFP_EXECUTOR = re.compile(r"^\[KFP Executor [^\]]*\]")  # the executor's own log lines
_RUNNER = re.compile(r"^\d\d:\d\d:\d\d\.\d+ - [A-Z]+ - ")  # the local runner's own ("21:45:51.688 - INFO - ...")
# The launch step's line naming the job it runs (kftrain.launch.step.run_job).
_LAUNCHING = re.compile(r"launching (\S+) (\S+) on the (\w+) backend")
_STEP_INDENT = "    "  # how KFP's local runner indents the lines of a step's output
_SHOWN = ("[kftrain] progress:", "[kftrain] mlflow:")  # step log lines shown as they come
_WARNING = "WARNING "  # a step's own logged warning (kftrain.step's log format: "%(levelname)s %(message)s")
FAILURE_LINES = 40  # the most lines of a failed step's error shown
GONE = "<the run's temporary folder, removed>"


@dataclass(frozen=True)
class StepFailure:
    step: str
    error: str  # the first line of what the step said went wrong ("" when it said nothing)
    job: str = ""  # the job the step ran, if any
    backend: str = ""

    def logs_command(self) -> str:
        """How to read the replicas' logs of the step's job once the run is over."""
        where = "" if self.backend in ("", "local") else f" --backend {self.backend}"
        return f"kftrain jobs{where} logs {self.job}" if self.job else ""


class QuietFilter:
    def __init__(
        self,
        write: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        show_all: bool = False,
        gone: str | Path | None = None,
    ) -> None:
        self._write = write
        self._clock = clock
        self._show_all = show_all
        self._gone = re.compile(re.escape(str(gone)) + r"[^\s'\"`),]*") if gone else None
        self._step = ""
        self._started = 0.0
        self._outputs: Path | None = None
        self._job: tuple[str, str] = ("", "")  # (name, backend) of the job the current step runs
        self._in_dump = False  # within KFP's executor_input dump
        self._dump_indent: str | None = None  # the indentation of its opening "{"
        self._recent: collections.deque[str] = collections.deque(maxlen=10 * FAILURE_LINES)
        self.failures: list[StepFailure] = []

    def feed(self, raw: str) -> None:
        if self._gone is not None:
            raw = self._gone.sub(GONE, raw)
        line = _ANSI.sub("", raw.rstrip("\n"))
        if self._show_all:
            self._write(raw.rstrip("\n"))
        if found := _STARTED.search(line):
            self._step, self._started, self._outputs = found.group(1), self._clock(), None
            self._job, self._in_dump = ("", ""), False
            self._recent.clear()
            self._say(f"[kftrain] {self._step}: started")
        elif found := _FINISHED.search(line):
            step, status = found.groups()
            took = self._clock() - self._started
            if status == "SUCCESS":
                self._say(f"[kftrain] {step}: finished in {took:.1f}s{self._summary()}")
            else:
                self._failed(step, status, took)
        elif not self._skipped(line):
            text = line.strip()
            if found := _EXECUTOR_OUTPUT.search(text):
                self._outputs = Path(found.group(1))
            if found := _LAUNCHING.search(text):
                self._job = (found.group(2), found.group(3))
            if text.startswith(_SHOWN):
                self._say(f"[kftrain]   {text.removeprefix('[kftrain] ')}")
            elif text.startswith(_WARNING) and self._step:
                self._say(f"[kftrain]   warning: {text.removeprefix(_WARNING)}")
            elif text.startswith(("ERROR", "Traceback")) and not self._step:
                self._say(text)  # outside any step: an error of the runner itself
            if text and not _KFP_EXECUTOR.match(text) and not _RUNNER.match(text):
                # KFP indents a step's output by 4 spaces; the step's own indentation (a job's log tail) stays.
                self._recent.append(line.removeprefix(_STEP_INDENT) if line.startswith(_STEP_INDENT) else text)

    def _say(self, text: str) -> None:
        if not self._show_all:
            self._write(text)

    def _skipped(self, line: str) -> bool:
        """Whether ``line`` is part of KFP's ``executor_input`` dump: from its header, its "{" to the "}" at the same
        indentation."""
        if _EXECUTOR_INPUT in line:
            self._in_dump, self._dump_indent = True, None
            return True
        if not self._in_dump:
            return False
        indent = line[: len(line) - len(line.lstrip())]
        if self._dump_indent is None:
            if line.strip() != "{":  # no JSON after the header after all
                self._in_dump = False
                return False
            self._dump_indent = indent
        elif indent == self._dump_indent and line.strip() == "}":
            self._in_dump = False
        return True

    def _failed(self, step: str, status: str, took: float) -> None:
        lines = list(self._recent)
        starts = [i for i, text in enumerate(lines) if text.startswith("ERROR")]
        error = lines[starts[-1] :] if starts else lines
        error = error[:FAILURE_LINES] if starts else error[-FAILURE_LINES:]
        name, backend = self._job
        failure = StepFailure(step=step, error=error[0] if error else "", job=name, backend=backend)
        self.failures.append(failure)
        self._say(f"[kftrain] {step}: {status} after {took:.1f}s" + ("" if error else " (it printed nothing)"))
        for text in error:
            self._say(f"    {text}")
        if failure.job:
            self._say(f"[kftrain]   the job's replica logs: {failure.logs_command()}")

    def _summary(self) -> str:
        """`` (job, metrics: name=value ..., model, passed=True)`` from the step's executor output: its artifacts by
        name (KFP writes them in no fixed order), then its scalar output parameters by name (a number as a metric is,
        a string quoted: ``model_version=''``, unless it repeats one of the step's artifact URIs)."""
        try:
            data = json.loads(self._outputs.read_text()) if self._outputs else {}
        except (OSError, ValueError):
            return ""
        names: list[str] = []
        uris: set[str] = set()
        for name, entry in sorted((data.get("artifacts") or {}).items()):
            uris.update(str(a.get("uri", "")) for a in entry.get("artifacts", []))
            values = [a.get("metadata", {}) for a in entry.get("artifacts", [])] if name == "metrics" else []
            scalars = [f"{k}={v:.4g}" for meta in values for k, v in meta.items() if isinstance(v, int | float)]
            names.append(f"{name}: {' '.join(scalars)}" if scalars else name)
        for key, value in sorted((data.get("parameterValues") or {}).items()):
            if isinstance(value, float):
                names.append(f"{key}={value:.4g}")
            elif isinstance(value, bool | int):
                names.append(f"{key}={value}")
            elif isinstance(value, str) and value not in uris:
                names.append(f"{key}={value!r}")
        return f" ({', '.join(names)})" if names else ""


@contextlib.contextmanager
def quiet_output(*, show_all: bool = False, gone: str | Path | None = None) -> Iterator[QuietFilter]:
    """Within the block, everything written to file descriptors 1 and 2 passes through a :class:`QuietFilter`; its
    ``failures`` are complete once the block has ended."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    console = os.fdopen(saved_out, "w", buffering=1, closefd=False)
    reader_gone = threading.Event()

    def show(text: str) -> None:
        # A reader that closed our output (`kftrain run | head`) must not stop the draining: the steps would block
        # on a full pipe. What it no longer reads is dropped.
        if reader_gone.is_set():
            return
        try:
            console.write(text + "\n")
        except (OSError, ValueError):
            reader_gone.set()

    filtered = QuietFilter(show, show_all=show_all, gone=gone)

    def pump() -> None:
        with os.fdopen(read_end, "r", errors="replace") as lines:
            for line in lines:
                filtered.feed(line)

    reader = threading.Thread(target=pump, name="quiet output", daemon=True)
    reader.start()
    try:
        yield filtered
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)  # the pipe's last writers go: the reader sees its end once the steps have exited
        os.dup2(saved_err, 2)
        reader.join(timeout=10)
        with contextlib.suppress(OSError, ValueError):
            console.flush()
        os.close(saved_out)
        os.close(saved_err)

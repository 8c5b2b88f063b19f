"""Fault injection for crash-resume tests and drills: a replica dies, or holds, at a chosen training step.

After every step :func:`maybe_inject_fault` reads the ``KFTRAIN_FAULT_*`` variables (whether, where, how often to
die). Before every step :func:`hold` waits while ``KFTRAIN_HOLD_FILE`` holds a number below the next step, so a drill
resizes or breaks a job at a known point instead of racing the training.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

FAULT_AT_STEP = "KFTRAIN_FAULT_AT_STEP"
FAULT_RANK = "KFTRAIN_FAULT_RANK"
FAULT_MARKER = "KFTRAIN_FAULT_MARKER"
HOLD_FILE = "KFTRAIN_HOLD_FILE"
HOLD_POLL_S = 0.1


def maybe_inject_fault(step: int, rank: int) -> None:
    """SIGKILL this replica at a known step when the environment asks for it.

    ``KFTRAIN_FAULT_AT_STEP=N`` kills the process of rank ``KFTRAIN_FAULT_RANK`` (default 1) when it
    reaches step N, as an OOM kill or a node loss would (exit code 137). With
    ``KFTRAIN_FAULT_MARKER=<path>`` it happens once (the marker is created first); without, every
    time the step is reached, which is how a crash loop looks.
    """
    at = os.environ.get(FAULT_AT_STEP)
    if not at or step != int(at) or rank != int(os.environ.get(FAULT_RANK, "1")):
        return
    marker = os.environ.get(FAULT_MARKER)
    if marker:
        if os.path.exists(marker):
            return
        with open(marker, "w") as handle:
            handle.write(f"killed at step {step}\n")
    log.warning("fault injection: killing rank %d at step %d", rank, step)
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def _hold_limit(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def hold(step: int, rank: int, stop: Callable[[], bool] | None = None) -> None:
    """Wait, before the step after ``step``, while ``KFTRAIN_HOLD_FILE`` holds a number <= ``step``, or until
    ``stop()`` (an event the trainer must meet first, such as a change of hosts).

    Logs ``holding after step N`` once when it starts waiting. Without the variable (or the file) it returns
    at once.
    """
    path = os.environ.get(HOLD_FILE)
    if not path:
        return
    waiting = False
    while True:
        limit = _hold_limit(path)
        if limit is None or step < limit or (stop is not None and stop()):
            if waiting:
                log.info("rank %d goes on after step %d", rank, step)
            return
        if not waiting:
            log.info("rank %d holding after step %d (%s holds %d)", rank, step, path, limit)
            waiting = True
        time.sleep(HOLD_POLL_S)

"""Fault injection for crash-resume tests and drills: a replica kills itself at a chosen training step.

The trainers call :func:`maybe_inject_fault` after every step; the ``KFTRAIN_FAULT_*`` variables in a
replica's environment say whether, where and how often it dies.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

FAULT_AT_STEP = "KFTRAIN_FAULT_AT_STEP"
FAULT_RANK = "KFTRAIN_FAULT_RANK"
FAULT_MARKER = "KFTRAIN_FAULT_MARKER"


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

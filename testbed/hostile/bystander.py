"""A bystander: a live process kftrain did not start, which a forged or stale job record names as its launcher, and
the check that ``kftrain jobs delete`` leaves it alone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from testbed.hostile.case import Observed, Sandbox


@contextmanager
def bystander(seconds: float) -> Iterator[tuple[subprocess.Popen[bytes], float]]:
    """The process (it sleeps ``seconds``) and its start time as psutil reads it; killed and reaped on the way out."""
    import psutil  # in the case's own process only: the table is listed without it

    process = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    try:
        yield process, psutil.Process(process.pid).create_time()
    finally:
        process.kill()
        process.wait()


def delete_spares(sb: Sandbox, name: str, process: subprocess.Popen[bytes], klass: str, signalled: str) -> int:
    """``kftrain jobs delete NAME``'s exit code; :class:`Observed` ``klass`` (``signalled``) where the bystander
    ended."""
    code = sb.cli("jobs", "delete", name)
    time.sleep(0.3)  # a signal sent is delivered by then
    if process.poll() is not None:
        raise Observed(klass, f"{signalled} (it ended {process.returncode})")
    return code

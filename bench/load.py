"""How busy the machine is, measured beside a benchmark, so a figure a busy machine spoiled is flagged as such.

A benchmark's ratio compares two programs run one after the other; when something else takes a core meanwhile,
both slow down, but not equally, and the ratio moves for a reason that is not ours. So each benchmark is
bracketed by a calibration: a fixed CPU-bound loop run once alone, then as many copies at once as the machine
has cores. On a quiet machine each copy has a core and they take as long as the one alone (contention about
1.0); when another program holds a core, the copies share the rest and contention rises toward
(cores + busy cores) / cores. The 1-minute load average is recorded beside it (it includes the benchmark's own
processes, so it is reported, not judged).

    python bench/load.py        # prints one calibration
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

# Above this, the calibration says another program held part of the machine.
BUSY_CONTENTION = 1.25
LOOP = "import time\nt = time.perf_counter()\nx = 0\nfor i in range({n}): x += i * i\nprint(time.perf_counter() - t)"
ITERATIONS = 3_000_000  # about 0.2 s of one quiet core


@dataclass(frozen=True)
class Load:
    load_average: float  # 1-minute load average when the calibration started
    alone_s: float  # the loop alone
    together_s: float  # the slowest of ``cores`` copies run at once
    cores: int

    @property
    def contention(self) -> float:
        return self.together_s / self.alone_s if self.alone_s > 0 else float("inf")

    @property
    def busy(self) -> bool:
        return self.contention > BUSY_CONTENTION

    def text(self) -> str:
        return f"load average {self.load_average:.2f}, contention {self.contention:.2f}"


def _loops(copies: int, iterations: int) -> list[float]:
    code = LOOP.format(n=iterations)
    procs = [
        subprocess.Popen([sys.executable, "-S", "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(copies)
    ]
    return [float(p.communicate()[0]) for p in procs]


def calibrate(iterations: int = ITERATIONS) -> Load:
    """One calibration: the loop alone, then one copy per core at once."""
    cores = os.cpu_count() or 1
    load_average = os.getloadavg()[0]
    alone = _loops(1, iterations)[0]
    time.sleep(0.05)
    together = max(_loops(cores, iterations))
    return Load(load_average, alone, together, cores)


def describe(before: Load, after: Load) -> str:
    """One note: the machine before and after a benchmark, and whether it was busy."""
    verdict = (
        f"machine BUSY (contention above {BUSY_CONTENTION:g}): a miss here may be the machine's"
        if before.busy or after.busy
        else "machine quiet"
    )
    return (
        f"load: before {before.text()}; after {after.text()} ({before.cores} CPU loops at once ÷ one alone); {verdict}"
    )


if __name__ == "__main__":
    found = calibrate()
    print(f"{found.text()} (alone {found.alone_s:.3f} s, {found.cores} at once {found.together_s:.3f} s)")

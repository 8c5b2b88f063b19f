"""A replica that fails a set number of times, then succeeds or runs on: the program of the restart tests, which
hold the local backend's restarts to the real operators' (tests/backends/local/test_restarts.py,
tests/controlplane/test_restarts.py).

Its arguments are in the comment below the imports.
"""

from __future__ import annotations

import os
import sys
import time

# ``python failing_replica.py COUNT_DIR ID_VAR PLAN THEN [EXIT]``
#
# * ``COUNT_DIR``: the folder where each run of replica ``<id>`` adds a line to ``runs-<id>`` as it starts (the
#   replicas share it, and it outlives their restarts);
# * ``ID_VAR``: the variable whose value names the replica (``PET_NODE_RANK``, ``RANK``); unset: ``0``;
# * ``PLAN``: ``<id>=<failures>`` items joined by ``,``: how many of its runs fail first (none for a replica not named);
# * ``THEN``: what the run after those does: ``succeed`` (exit 0) or ``run`` (sleep until stopped);
# * ``EXIT``: the failing runs' exit code (default 3, the program's own failure; 137 is how a kill by the kernel or a
#   preemption ends).
#
# A failing run prints ``run N of <id>: failing`` and exits with code ``EXIT``.


FAILED_EXIT = 3


def main(count_dir: str, id_var: str, plan: str, then: str, exit_code: str = str(FAILED_EXIT)) -> int:
    me = os.environ.get(id_var, "0")
    failures = dict(item.split("=") for item in plan.split(",") if item)
    path = os.path.join(count_dir, f"runs-{me}")
    with open(path, "a") as runs:
        runs.write("run\n")
    with open(path) as runs:
        run = len(runs.readlines())
    if run <= int(failures.get(me, 0)):
        print(f"run {run} of {me}: failing", flush=True)
        return int(exit_code)
    print(f"run {run} of {me}: {then}", flush=True)
    while then == "run":
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))

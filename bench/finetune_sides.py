"""P16's two sides, one run each in a process of its own: the fine-tuning program under bare torchrun, or through
the PyTorchJob launch step on the local backend as a pipeline calls it.

    python bench/finetune_sides.py SIDE DATASET FOLDER REPLICAS -- PROGRAM_FLAGS...

Prints one JSON line: rank 0's summary (its tokens/s over its training seconds), the run's wall seconds, the
largest peak RSS of the program's processes and their CPU seconds (``getrusage`` of this process's waited-for
descendants) and, for the launch side, this process's own (the launch step's).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from child import run_child  # bench/child.py, beside this script

SIDES = ("bare", "launch")
PROGRAM = "kftrain.programs.hf_finetune"


def run_side(side: str, dataset: str, folder: Path, replicas: int, flags: list[str]) -> dict[str, Any]:
    script = str(Path(__file__).resolve())
    return run_child([script, side, dataset, str(folder), str(replicas), "--", *flags], f"P16 {side}")


def summary(text: str) -> dict[str, Any]:
    """Rank 0's closing line (kftrain.programs.common.print_summary)."""
    found: dict[str, Any] = json.loads([line for line in text.splitlines() if line.startswith('{"rank": 0')][-1])
    return found


def bare(dataset: str, folder: Path, replicas: int, flags: list[str]) -> dict[str, Any]:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    command = [torchrun, "--standalone", f"--nproc-per-node={replicas}", "-m", PROGRAM, "--dataset", dataset,
               "--model-dir", str(folder / "model"), *flags]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    # torchrun's agent writes its torchelastic_* logs under the temporary folder: the run's own, removed with it.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(folder)}
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode:
        raise SystemExit(run.stdout[-3000:] + run.stderr[-3000:])
    return summary(run.stdout)


def launch(dataset: str, folder: Path, replicas: int, flags: list[str]) -> dict[str, Any]:
    """The launch component's Python function with a pipeline's inputs: ``finetune_args``' URI flags first, a
    Master and ``replicas - 1`` Workers running ``python -m`` the program (pipelines/llm/llm_finetune's command)."""
    from kftrain.launch.component import PROGRAM_FLAGS
    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch

    folder.mkdir(parents=True)
    call_launch(pytorchjob_launch, folder, backend="local", dataset_uri=dataset, command=["python", "-m", PROGRAM],
                args=[*PROGRAM_FLAGS, *flags], workers=replicas - 1)  # fmt: skip
    return summary((folder / "model-logs" / "master-0.log").read_text())


def main() -> int:
    side, dataset, folder, replicas = sys.argv[1:5]
    flags = sys.argv[sys.argv.index("--") + 1 :]
    load_average, started = os.getloadavg()[0], time.monotonic()
    found = {"bare": bare, "launch": launch}[side](dataset, Path(folder), int(replicas), flags)
    found["wall_seconds"], found["load_average"] = time.monotonic() - started, load_average
    children, own = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    found["peak_rss_mb_max_process"] = children.ru_maxrss / 1024
    found["program_cpu_seconds"] = children.ru_utime + children.ru_stime  # torchrun's too on the bare side
    if side == "launch":  # what the launch step itself took beside the replicas, on the same cores
        found["launch_step_rss_mb"] = own.ru_maxrss / 1024
        found["launch_step_cpu_seconds"] = own.ru_utime + own.ru_stime
    print(json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The local backend's output: every replica's lines prefixed with its name and kept in its log file, a closed
console (``| head``) never hanging the job, and an endless line kept out of memory and out of the messages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kftrain.backends.local import LocalBackend
from kftrain.job import load_manifest
from testbed.local_harness import PY, assert_ok, finish, launch_cli, marked, marked_job, options, program, rep
from testbed.manifests import tfjob

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")


def test_output_is_streamed_with_replica_prefixes(tmp_path):
    cmd = program(tmp_path, "talk", "import os\nprint('hello', os.environ['POD_NAME'])\nprint('bye')\n")
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, env)}, name="talk", successPolicy="AllWorkers")
    opts = options(tmp_path)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    lines = opts.out.getvalue().splitlines()  # type: ignore[union-attr]
    assert all(line.startswith(("[kftrain] ", "[worker-0] ", "[worker-1] ")) for line in lines), lines
    for i in (0, 1):
        own = [line for line in lines if line.startswith(f"[worker-{i}] ")]
        assert own == [f"[worker-{i}] hello talk-worker-{i}", f"[worker-{i}] bye"]
        log = tmp_path / "wd" / "logs" / f"worker-{i}.log"
        assert log.read_text() == f"hello talk-worker-{i}\nbye\n"
    assert lines[0].startswith("[kftrain] starting TFJob talk: worker-0, worker-1")


TALKER = """
import os, sys
for i in range(int(os.environ["LINES"])):
    print(f"line {i} " + "x" * 100, flush=True)
"""


def test_closed_stdout_does_not_hang_kftrain(tmp_path: Path, mark: str) -> None:
    """``kftrain launch ... | head -c 200``: the job runs to its end, every line still in the log file."""
    proc = launch_cli(marked_job(tmp_path, mark, TALKER, workers=0, LINES="20000"), tmp_path, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    head = proc.stdout.read(200)
    proc.stdout.close()  # as head does once it has its 200 bytes
    code = finish(proc, 120)
    assert head.startswith(b"[kftrain] starting PyTorchJob hyg")
    assert code == 0, (tmp_path / "kftrain.log").read_text()
    assert "Traceback" not in (tmp_path / "kftrain.log").read_text()
    assert (tmp_path / "wd" / "logs" / "master-0.log").read_text().count("\n") == 20000
    assert marked(mark) == []


NO_NEWLINE = """
import os, sys
chunk = "y" * (1 << 20)
for _ in range(int(os.environ["MIB"])):
    sys.stdout.write(chunk)
sys.stdout.flush()
sys.exit(int(os.environ["EXIT"]))
"""


# Runs a command and writes the peak RSS (KiB) of it and its waited-for descendants to argv[1].
PEAK_RSS = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def test_endless_line_keeps_memory_and_messages_bounded(tmp_path: Path, mark: str) -> None:
    """300 MB without a newline pushed kftrain to 1.4 GB; now its memory stays flat and messages short."""
    job = marked_job(tmp_path, mark, NO_NEWLINE, workers=0, MIB="200", EXIT="3")
    peak = tmp_path / "peak-rss"
    code = finish(launch_cli(job, tmp_path, wrapper=(PY, "-c", PEAK_RSS, str(peak))), 300)
    log = (tmp_path / "kftrain.log").read_text()
    assert code == 3, log[-2000:]
    assert (tmp_path / "wd" / "logs" / "master-0.log").stat().st_size == 200 << 20  # the whole line, in the file
    assert len(log) < 100_000, f"{len(log)} bytes of messages"
    assert "line cut: " in log and "more bytes, all of it in" in log
    # The largest of kftrain and its waited-for descendants (the replica writes in 1 MiB pieces).
    peak_mib = int(peak.read_text()) / 1024
    assert peak_mib < 200, f"peak RSS {peak_mib:.0f} MiB"
    assert marked(mark) == []

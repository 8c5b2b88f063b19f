"""docs/elastic-and-fault-tolerance.md's recipe for a DDP script of the user's own
(examples/elastic/ddp_global_batch.py, no kftrain import) keeps the global batch across a resize: a run that starts
with 1 process and resumes with 3 trains every step on the rows an uninterrupted 2-process run does, and ends with the
same weights."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from testbed import REPO_ROOT

ROOT = REPO_ROOT
SCRIPT = ROOT / "examples" / "elastic" / "ddp_global_batch.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed"),
]


def torchrun(nproc: int, ckpt: Path, *extra: str) -> str:
    cmd = [str(TORCHRUN), "--standalone", f"--nproc_per_node={nproc}", str(SCRIPT)]
    args = ["--global-batch-size", "24", "--micro-batch", "5", "--epochs", "2", "--checkpoint-dir", str(ckpt)]
    proc = subprocess.run([*cmd, *args, *extra], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def rows_by_step(out: str) -> dict[int, tuple[int, list[int]]]:
    found: dict[int, dict[int, tuple[int, list[int]]]] = defaultdict(dict)
    pattern = r"^step (\d+) epoch (\d+) batch \d+ rank (\d+) rows ([\d,]+)$"
    for step, epoch, rank, rows in re.findall(pattern, out, re.MULTILINE):
        found[int(step)][int(rank)] = (int(epoch), [int(r) for r in rows.split(",")])
    return {s: (ranks[0][0], [r for k in sorted(ranks) for r in ranks[k][1]]) for s, ranks in found.items()}


def test_a_users_ddp_script_keeps_the_global_batch_across_a_resize(tmp_path: Path) -> None:
    import torch

    assert "kftrain" not in re.sub(r'""".*?"""', "", SCRIPT.read_text(), flags=re.S)  # its code never names it

    baseline = torchrun(2, tmp_path / "baseline")
    first = torchrun(1, tmp_path / "resized", "--stop-after-step", "7")  # 10 steps per epoch: stops mid-epoch
    resumed = torchrun(3, tmp_path / "resized")

    # The same global batch and learning rate at every size; micro-batches of at most 5 rows, accumulated.
    assert "global batch 24 = 2 x 3 micro-batch(es) of 4; lr 0.1; from step 0" in baseline
    assert "global batch 24 = 1 x 6 micro-batch(es) of 4; lr 0.1; from step 0" in first
    assert "global batch 24 = 3 x 2 micro-batch(es) of 4; lr 0.1; from step 7 (epoch 0, 7 batches done)" in resumed

    expected, got = rows_by_step(baseline), {**rows_by_step(first), **rows_by_step(resumed)}
    assert sorted(got) == sorted(expected) == list(range(1, 21))
    for step in expected:  # the same rows behind every optimizer step (in the same order)
        assert got[step] == expected[step], step
    epoch0 = [r for s in range(1, 11) for r in got[s][1]]
    assert len(epoch0) == len(set(epoch0)) == 240  # the interrupted epoch: no row skipped or repeated

    a = torch.load(tmp_path / "baseline" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resized" / "checkpoint.pt", weights_only=True)["model"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5)

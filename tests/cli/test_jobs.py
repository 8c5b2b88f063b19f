"""``kftrain jobs status`` of a job that reports metrics shows its progress, as its launch step prints it."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.backends import LocalBackend, LocalConfig
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.cli.app import main
from kftrain.job import load_manifest
from testbed.manifests import pytorchjob, replica
from testbed.polling import wait_until

TRAINING = """
import json, os, time
print("KFTRAIN_METRICS_TOTAL " + json.dumps({"epoch": 20}), flush=True)
for epoch in (1, 2, 3):
    print("KFTRAIN_METRICS " + json.dumps({"epoch": epoch, "loss": 1.0 / epoch}), flush=True)
open(os.path.join(os.environ["OUT_DIR"], "reported"), "w").close()
while True:
    time.sleep(0.1)
"""


def test_the_status_of_a_running_job_shows_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    program = tmp_path / "train.py"
    program.write_text(textwrap.dedent(TRAINING))
    env = [{"name": "OUT_DIR", "value": str(tmp_path)}]
    manifest = pytorchjob({"Master": replica(1, "pytorch", [sys.executable, str(program)], env=env)})
    manifest["metadata"]["name"] = "busy-job"
    backend = LocalBackend(LocalConfig(out=io.StringIO(), grace_period_s=2))
    handle = backend.submit(load_manifest(manifest))
    try:
        wait_until(lambda: (tmp_path / "reported").exists(), timeout=60, what="the job's metrics")
        capsys.readouterr()
        assert main(["jobs", "status", "busy-job"]) == 0
        out = capsys.readouterr().out
    finally:
        backend.cancel(handle)
        backend.wait(handle, 60)
    assert "PyTorchJob Running" in out, out
    assert "  progress: epoch 3/20 loss 0.3333 (master-0)\n" in out, out

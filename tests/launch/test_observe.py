"""What the launch step keeps of a job, however it ends: every replica's whole log beside the model (a local
folder, and the S3 test server), the progress line while it runs, and the collected points."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kftrain import storage
from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from kftrain.job.naming import outputs_of
from kftrain.launch.observe import JobObserver, logs_uri, observing, tensorboard_uri
from kftrain.signals import Terminated
from testbed.manifests import pytorchjob, replica

# Reports 3 epochs, then ends as $END says: "ok", "fail" (worker-0 exits 3), or "hang" (until stopped). The
# master ends after the worker (a PyTorchJob succeeds when its master does, stopping the rest). worker-1 ends
# at once, silent.
PROGRAM = """
import os, sys, time
name = os.environ["POD_NAME"]
if name.endswith("worker-1"):
    sys.exit(0)
from kftrain.metrics import report, report_total
report_total(epoch=3)
for epoch in range(1, 4):
    print(f"{name} epoch {epoch}", flush=True)
    report(epoch=epoch, loss=1.0 / epoch, val_accuracy=0.3 * epoch)
end, done = os.environ["END"], os.path.join(os.environ["OUT_DIR"], "worker-done")
if name.endswith("master-0"):
    open(os.path.join(os.environ["OUT_DIR"], "master-reported"), "w").close()
if end == "fail" and name.endswith("worker-0"):
    while not os.path.exists(os.path.join(os.environ["OUT_DIR"], "master-reported")):
        time.sleep(0.02)  # the master's lines are out before the failure stops it
    print("worker-0: out of memory, giving up", flush=True)
    sys.exit(3)
if end == "hang" or (end == "fail" and name.endswith("master-0")):
    print("waiting forever", flush=True)
    while True:
        time.sleep(0.1)
print("last line", flush=True)
if name.endswith("worker-0"):
    open(done, "w").close()
while not os.path.exists(done):
    time.sleep(0.02)
"""


def job_of(tmp_path: Path, end: str) -> Any:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(PROGRAM))
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "END", "value": end},
        {"name": "OUT_DIR", "value": str(tmp_path)},
        {"name": "PYTHONPATH", "value": os.environ.get("PYTHONPATH", "")},
    ]
    cmd = [sys.executable, str(path)]
    manifest = pytorchjob(
        {
            "Master": replica(1, "pytorch", cmd, env=env, restart_policy="Never"),
            "Worker": replica(2, "pytorch", cmd, env=env, restart_policy="Never"),
        }
    )
    return load_manifest(manifest)


def run_observed(tmp_path: Path, model_uri: str, end: str) -> tuple[JobResult | None, JobObserver, str]:
    out = io.StringIO()
    config = LocalConfig(workdir=tmp_path / "wd", out=out, grace_period_s=2.0, poll_interval_s=0.02)
    result: JobResult | None = None
    if end == "hang":
        # The run is cancelled once every replica is waiting: SIGTERM, as KFP sends the step's pod.
        def cancel_when_waiting() -> None:
            deadline = time.monotonic() + 60
            while out.getvalue().count("waiting forever") < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=cancel_when_waiting, daemon=True).start()
    expected = pytest.raises(Terminated) if end == "hang" else contextlib.nullcontext()
    job = job_of(tmp_path, end)
    with expected, observing(config, job, model_uri, progress_every_s=0.0) as observer:
        result = LocalBackend(config).run(job, timeout=90)  # a hang fails, never blocks
    assert outputs_of(job.metadata.annotations) == (model_uri, logs_uri(model_uri))  # for `kftrain jobs`
    return result, observer, out.getvalue()


@pytest.mark.parametrize("end", ["ok", "fail", "hang"])
def test_every_replica_log_is_kept_beside_the_model_however_the_job_ends(tmp_path: Path, end: str) -> None:
    model_uri = str(tmp_path / "outputs" / "model")
    result, observer, out = run_observed(tmp_path, model_uri, end)
    if end == "ok":
        assert result is not None and result.succeeded
    if end == "fail":
        assert result is not None and (result.phase, result.exit_code) == (JobPhase.FAILED, 3)
    logs = Path(logs_uri(model_uri))
    assert sorted(p.name for p in logs.iterdir()) == ["master-0.log", "worker-0.log", "worker-1.log"]
    for label in ("master-0", "worker-0", "worker-1"):
        text = (logs / f"{label}.log").read_text()
        streamed = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith(f"[{label}] ")]
        assert text.splitlines() == streamed  # whole: every line the step streamed, in order
    assert (logs / "worker-1.log").read_text() == ""  # printed nothing: an empty log, not a missing one
    for label in ("master-0", "worker-0"):
        assert f"{label} epoch 3" in (logs / f"{label}.log").read_text()
    last = {"ok": "last line", "fail": "worker-0: out of memory, giving up", "hang": "waiting forever"}[end]
    assert last in (logs / "worker-0.log").read_text()
    assert f"replica logs: {logs_uri(model_uri)}/" in out
    # Both replicas reported the same points: one series, one TensorBoard run.
    seen = observer.observation
    assert seen is not None and seen.final == {
        "epoch": 3.0,
        "loss": pytest.approx(1 / 3),
        "val_accuracy": pytest.approx(0.9),
    }
    assert [p.name for p in Path(tensorboard_uri(model_uri)).iterdir()] == ["master-0_worker-0"]
    assert "progress: epoch 3/3 loss 0.3333 val_accuracy 0.9" in out


@pytest.mark.parametrize("end", ["ok", "fail", "hang"])
def test_logs_reach_object_storage(tmp_path: Path, s3_env: str, end: str) -> None:
    model_uri = f"{s3_env}/run-1/task-1/model"
    _, _, out = run_observed(tmp_path, model_uri, end)
    names = sorted(storage.list_files(logs_uri(model_uri)))
    assert names == ["master-0.log", "worker-0.log", "worker-1.log"]
    text = storage.read_bytes(storage.join(logs_uri(model_uri), "worker-0.log")).decode()
    assert "worker-0 epoch 3" in text
    assert storage.list_files(tensorboard_uri(model_uri))
    assert f"replica logs: {logs_uri(model_uri)}/" in out

"""Cancelling a job on Kubernetes: ``cancel`` is idempotent, and ``kftrain launch --backend kubernetes`` deletes
its job on SIGTERM, for a training-operator kind and a TrainJob alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from kftrain.backends.base import load_identity
from testbed.fake_k8s import FakeKube, OperatorSim
from testbed.k8s_harness import forever, make_backend, pytorch_job
from testbed.manifests import pytorchjob, trainjob
from testbed.reference import REPO


def test_cancel_is_idempotent(kube: FakeKube) -> None:
    backend, _ = make_backend(kube)
    handle = backend.submit(pytorch_job())
    backend.cancel(handle)
    backend.cancel(handle)
    other, _ = make_backend(kube)
    other.cancel(handle)  # already gone: 404 is fine
    assert kube.jobs_of("pytorchjobs") == []


# The CLI (`kftrain launch -f JOB --backend kubernetes`) on a training-operator kind and on a TrainJob, both
# streaming a replica's log when SIGTERM comes.
CLI_JOBS = {
    "PyTorchJob": (pytorchjob({"Master": 1, "Worker": 1}, name="term"), "master-0"),
    "TrainJob": (trainjob(name="term", trainer={"numNodes": 2, "command": ["x"]}), "node-0"),
}


@pytest.mark.parametrize("kind", list(CLI_JOBS))
def test_sigterm_deletes_the_job(kind: str, kube: FakeKube, operator: OperatorSim, tmp_path: Path) -> None:
    manifest, streaming = CLI_JOBS[kind]
    operator.scenario = forever(streaming)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(manifest))
    identity = tmp_path / "job.json"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
        "PYTHONPATH": str(REPO),
    }
    for name in ("KFP_POD_NAME", "KFP_POD_UID", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(job_file), "--backend", "kubernetes"]
    proc = subprocess.Popen(
        [*cli, "--identity-file", str(identity)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    plural = manifest["kind"].lower() + "s"
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        end = time.monotonic() + 20
        while not any(line.startswith(f"[{streaming}] step") for line in list(lines)):  # inside the wait
            assert proc.poll() is None and time.monotonic() < end, "".join(lines)
            time.sleep(0.05)
        assert identity.exists() and kube.jobs_of(plural)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        while kube.jobs_of(plural):
            assert time.monotonic() - sent < 10, "job not deleted within 10 s of SIGTERM"
            time.sleep(0.05)
        rc = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    output = "".join(lines)
    assert rc == 143, output
    assert "terminated" in output, output
    assert [d[2] for d in kube.deletions] == [load_identity(identity).name]

"""A launch component's own body, as its tests beside it call it: with everything but the run (the job it would
submit), or run whole by KFP's local runner on the local backend."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kftrain.launch.component
from kftrain.backends.base import BackendConfig, JobPhase, JobResult
from kftrain.job import TrainingJob, render_manifest
from testbed.manifests import as_yaml
from testbed.reference import REPO

# Each rank all-reduces its rank + 1 over gloo (1 + 2 + 3 = 6 on 3 nodes) and says so, naming its node.
GLOO_PROGRAM = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} node {os.environ['GROUP_RANK']} sum {int(total.item())}")
dist.destroy_process_group()
"""

# Every platform input of the launch components, as a platform engineer sets them on the pipeline.
SETTINGS: dict[str, Any] = {
    "node_selector": {"pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "service_account": "trainer",
    "image_pull_secrets": ["regcred"],
    "secret_env": {"WANDB_API_KEY": "wandb/api-key"},
    "storage_secret": "mlpipeline-minio-artifact",
    "pvc_mounts": {"/data": "datasets"},
    "shm_size": "1Gi",
    "priority_class": "training",
    "queue_name": "team-a",
    "scheduling": {"queue": "volcano-a", "minAvailable": 2},
    "ttl_seconds_after_finished": 600,
    "cpu": "2",
    "memory": "4Gi",
    "gpus": 1,
}


@dataclass
class Rendered:
    manifest: dict[str, Any]
    kind: str  # the job kind the component built
    config: BackendConfig  # the backend config the step chose
    model_metadata: dict[str, Any]  # what the component wrote on its Model output


def kfp_outputs(tmp_path: Path) -> dict[str, Any]:
    """The training observations a launch component writes (KFP Metrics and an HTML artifact), as KFP hands them."""
    return {
        "metrics": SimpleNamespace(uri=str(tmp_path / "metrics"), metadata={}, log_metric=lambda name, value: None),
        "curves": SimpleNamespace(uri=str(tmp_path / "curves"), metadata={}, path=str(tmp_path / "curves.html")),
    }


def call_launch(component: Any, folder: Path, **inputs: Any) -> SimpleNamespace:
    """Call ``component``'s Python function as a pipeline would (its outputs in ``folder``, run ``run-1``, task
    ``task-1``); returns its Model output."""
    model = SimpleNamespace(uri=str(folder / "model"), metadata={})
    given = {"run_id": "run-1", "task_id": "task-1", **inputs}
    component.python_func(model=model, job=str(folder / "job"), **kfp_outputs(folder), **given)
    return model


def render_launch(component: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **inputs: Any) -> Rendered:
    """Call ``component``'s Python function as a pipeline would; only the job's run is replaced by a record of it."""
    seen: dict[str, Any] = {}
    weights = tmp_path / "model" / "model.bin"

    def record(job: TrainingJob, config: BackendConfig, *, timeout: float | None = None) -> JobResult:
        seen["manifest"], seen["kind"], seen["config"] = render_manifest(job), job.kind, config
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"weights")  # what a succeeding trainer leaves behind
        return JobResult(JobPhase.SUCCEEDED)

    monkeypatch.setattr(kftrain.launch.component, "run_job", record)
    model = call_launch(component, tmp_path, **{"dataset_uri": "/data/ds", **inputs})
    return Rendered(seen["manifest"], seen["kind"], seen["config"], model.metadata)


def launch_renderer(component: Any, kind: str) -> Callable[..., Rendered]:
    """``render(monkeypatch, tmp_path, **inputs)``: what ``component`` would launch, checked to be a ``kind``."""

    def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **inputs: Any) -> Rendered:
        rendered = render_launch(component, monkeypatch, tmp_path, **inputs)
        assert rendered.kind == kind
        return rendered

    return render


def launch_locally(
    manifest: dict[str, Any],
    tmp_path: Path,
    *extra: str,
    job_timeout: int,
    timeout: int,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``kftrain launch -f <manifest> --local --timeout JOB_TIMEOUT EXTRA...`` from the repository, its output kept
    (``env``: the launcher's whole environment, else this process's)."""
    path = tmp_path / "job.yaml"
    path.write_text(as_yaml(manifest))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kftrain.cli",
            "launch",
            "-f",
            str(path),
            "--local",
            "--timeout",
            str(job_timeout),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


# The launch step fails a job that succeeded without writing its model, so a real run's replicas write one.
def writes_a_model(replicas: int) -> list[str]:
    """A replica's command: write the model, log the model's URI, then wait until all ``replicas`` replicas have
    logged theirs. The wait matters because a job may succeed, and its other replicas be stopped, as soon as one
    replica finishes: a TFJob when worker 0 (or the chief) does (kubeflow/training-operator@v1.9.0:
    pkg/controller.v1/tensorflow/tfjob_controller.go, UpdateJobStatus), a PyTorchJob when its master does."""
    return [
        "python",
        "-c",
        "import os, time; d = os.environ['KFTRAIN_MODEL_URI']; os.makedirs(d, exist_ok=True); "
        "open(os.path.join(d, 'weights.txt'), 'w').write('w'); print('replica', d, flush=True); "
        "ran = d + '.ran'; os.makedirs(ran, exist_ok=True); open(os.path.join(ran, str(os.getpid())), 'w').close(); "
        "deadline = time.monotonic() + 60\n"
        f"while len(os.listdir(ran)) < {replicas}:\n"
        "    assert time.monotonic() < deadline, 'the other replicas never ran'; time.sleep(0.05)",
    ]


def check_local_run(component: Any, kind: str, replicas: set[str], **inputs: Any) -> None:
    """``component`` run as a task of KFP's local runner (the ``kfp_local`` fixture) on the local backend, every
    replica running :func:`writes_a_model`: the step ran its ``kind`` job (named after the kind), every one of
    ``replicas`` ran with the model's URI and its log is kept beside the model, and the model is what they wrote."""
    task = component(backend="local", command=writes_a_model(len(replicas)), **inputs)
    job = json.loads(task.outputs["job"])  # the identity of the job the step ran
    model = Path(task.outputs["model"].uri)
    logs = {p.stem: p.read_text() for p in sorted(model.with_name("model-logs").glob("*.log"))}
    assert (job["backend"], job["kind"]) == ("local", kind) and job["name"].startswith(kind.lower() + "-"), job
    assert (model / "weights.txt").read_text() == "w"
    assert set(logs) == replicas
    assert all(f"replica {model}" in log for log in logs.values()), logs

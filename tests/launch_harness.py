"""Run a launch component's own body with everything but the run: the job it would submit, for component tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import kftrain.launch.component
from kftrain.backends.base import BackendConfig, JobPhase, JobResult
from kftrain.job import TrainingJob, render_manifest
from kftrain.job.manifest.schema import CRDSchemas

try:
    from conftest import REFERENCE_DIR
except ImportError:  # imported as tests.launch_harness
    from tests.conftest import REFERENCE_DIR


REPO = Path(__file__).resolve().parents[1]

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


def render_launch(component: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **inputs: Any) -> Rendered:
    """Call ``component``'s Python function as a pipeline would; only the job's run is replaced by a record of it."""
    seen: dict[str, Any] = {}
    model = SimpleNamespace(uri=str(tmp_path / "model"), metadata={})

    def record(job: TrainingJob, config: BackendConfig, *, timeout: float | None = None) -> JobResult:
        seen["manifest"], seen["kind"], seen["config"] = render_manifest(job), job.kind, config
        (Path(model.uri) / "model.bin").parent.mkdir(parents=True, exist_ok=True)
        (Path(model.uri) / "model.bin").write_bytes(b"weights")  # what a succeeding trainer leaves behind
        return JobResult(JobPhase.SUCCEEDED)

    monkeypatch.setattr(kftrain.launch.component, "run_job", record)
    component.python_func(
        model=model,
        job=str(tmp_path / "job"),
        **kfp_outputs(tmp_path),
        **{"run_id": "run-1", "task_id": "task-1", "dataset_uri": "/data/ds", **inputs},
    )
    return Rendered(seen["manifest"], seen["kind"], seen["config"], model.metadata)


def launch_renderer(component: Any, kind: str) -> Callable[..., Rendered]:
    """``render(monkeypatch, tmp_path, **inputs)``: what ``component`` would launch, checked to be a ``kind``."""

    def render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **inputs: Any) -> Rendered:
        rendered = render_launch(component, monkeypatch, tmp_path, **inputs)
        assert rendered.kind == kind
        return rendered

    return render


def crd_schemas_fixture() -> Any:
    """A module-scoped ``crd_schemas`` fixture (:func:`load_crd_schemas`), for tests outside tests/."""

    @pytest.fixture(scope="module")
    def crd_schemas() -> CRDSchemas:
        return load_crd_schemas()

    return crd_schemas


def manifest_text(api_version: str, kind: str, name: str, spec: dict[str, Any]) -> str:
    """A job manifest as a user hands it to a launch component: YAML text."""
    manifest = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}
    return yaml.safe_dump(manifest, sort_keys=False)


def replica_spec(replicas: int, **container: Any) -> dict[str, Any]:
    """A replica spec whose pod has the one container ``container``."""
    return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}


def load_crd_schemas() -> CRDSchemas:
    """The operators' CRD schemas, or a skip when the reference data is not checked out beside the repo."""
    crds = REFERENCE_DIR / "crds"
    if not crds.is_dir():
        pytest.skip(f"reference data not available: {crds} is missing (the operators' CRDs)")
    return CRDSchemas.from_dir(crds)


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
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
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

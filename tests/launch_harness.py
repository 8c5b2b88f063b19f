"""Run a launch component's body without launching: the manifest it would submit, for component tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kftrain.launch
from kftrain.job import load_manifest, render_manifest
from kftrain.job.crd_schema import CRDSchemas
from kftrain.launch import inject_artifact_env, job_from_inputs

try:
    from conftest import REFERENCE_DIR
except ImportError:  # imported as tests.launch_harness
    from tests.conftest import REFERENCE_DIR

URIS = {
    "KFTRAIN_DATASET_URI": "/data/ds",
    "KFTRAIN_MODEL_URI": "/data/model",
    "KFTRAIN_CHECKPOINT_URI": "/data/model-checkpoints",
}


@dataclass
class Rendered:
    manifest: dict[str, Any]
    kind: str  # the job kind the component asked launch_step for
    model_metadata: dict[str, Any]  # what the component wrote on its Model output


def render_launch(component: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **inputs: Any) -> Rendered:
    """Call ``component``'s Python function with ``launch_step`` replaced by one that only renders the job."""
    seen: dict[str, Any] = {}

    def fake_launch_step(**kw: Any) -> Any:
        if kw["manifest"].strip():
            job = load_manifest(kw["manifest"])
            job.metadata.name = kw["inputs"].name
        else:
            job = job_from_inputs(kw["inputs"])
        inject_artifact_env(job, URIS)
        seen["manifest"] = render_manifest(job)
        seen["kind"] = kw["kind"]
        return SimpleNamespace(duration_s=0.0)

    monkeypatch.setattr(kftrain.launch, "launch_step", fake_launch_step)
    model = SimpleNamespace(uri=str(tmp_path / "model"), metadata={})
    component.python_func(
        dataset=SimpleNamespace(uri="/data/ds"),
        model=model,
        job=str(tmp_path / "job"),
        run_id="run-1",
        task_id="task-1",
        **inputs,
    )
    return Rendered(seen["manifest"], seen["kind"], model.metadata)


def load_crd_schemas() -> CRDSchemas:
    """The operators' CRD schemas, or a skip when the reference data is not checked out beside the repo."""
    crds = REFERENCE_DIR / "crds"
    if not crds.is_dir():
        pytest.skip(f"reference data not available: {crds} is missing (the operators' CRDs)")
    return CRDSchemas.from_dir(crds)

"""A replica count the CRD allows (int32) but no machine could enumerate is refused by a limit that names the count,
before any replica is listed or anything submitted, on either backend: the launch components (typed inputs and
manifests, each kind), the Kubernetes backend's submit, the local backend's scale.

Each launch runs in a child whose address space is capped, so enumerating the replicas fails there fast (with a
MemoryError traceback) instead of exhausting this machine."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from testbed import REPO_ROOT
from testbed.manifests import as_yaml, pytorchjob, replica, tfjob

REPO = REPO_ROOT
BIG = 2**31 - 1  # the CRD's int32 maximum: valid for the schema
COMMAND = {"image": "registry.example.com/train:1", "command": ["python", "-c", "print(1)"]}

LAUNCH = textwrap.dedent(
    """
    import json, resource, sys
    from types import SimpleNamespace
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    component, inputs, tmp = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    module = __import__(f"kftrain_components.training.{component}.component", fromlist=[component])
    getattr(module, component).python_func(
        dataset_uri=tmp + "/ds", model=SimpleNamespace(uri=tmp + "/model", metadata={}),
        job=tmp + "/job", run_id="r", task_id="t", metrics=None, curves=None, **inputs,
    )
    """
)

PYTORCH_BIG = as_yaml(
    pytorchjob({"Master": replica(1, "pytorch", **COMMAND), "Worker": replica(BIG, "pytorch", **COMMAND)}, name="big")
)
TF_BIG = as_yaml(tfjob({"Worker": replica(BIG, "tensorflow", **COMMAND)}, name="big"))

CASES = [
    ("pytorchjob_launch", {"workers": BIG}, "spec.pytorchReplicaSpecs.Worker.replicas"),
    ("pytorchjob_launch", {"workers": 10**12}, "workers"),
    ("pytorchjob_launch", {"manifest": PYTORCH_BIG}, "spec.pytorchReplicaSpecs.Worker.replicas"),
    ("tfjob_launch", {"manifest": TF_BIG}, "spec.tfReplicaSpecs.Worker.replicas"),
    ("mpijob_launch", {"workers": BIG}, "spec.mpiReplicaSpecs.Worker.replicas"),
    ("trainjob_launch", {"num_nodes": BIG}, "replicas"),
]


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
@pytest.mark.parametrize(("component", "inputs", "field"), CASES, ids=[f"{c}:{f}" for c, i, f in CASES])
def test_a_huge_replica_count_is_refused_naming_it_before_anything_is_listed(
    component: str, inputs: dict[str, Any], field: str, backend: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCH, component, json.dumps({**COMMAND, **inputs, "backend": backend}), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR: "))
    assert field in error.partition(":")[2] or error.startswith(f"ERROR: {field}:"), error
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "job").exists()  # nothing was submitted


def test_the_kubernetes_backend_refuses_a_huge_job_before_creating_it(kube: Any) -> None:
    from kubernetes import client

    job = load_manifest(PYTORCH_BIG)
    job.metadata.namespace = "default"
    backend = KubernetesBackend(KubernetesConfig(), client.ApiClient(client.Configuration(host=kube.url)))
    with pytest.raises(JobSpecError) as exc:
        backend.submit(job)
    assert exc.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert "KubernetesConfig.max_replicas" in str(exc.value)
    assert kube.created == []

"""The official TFJob examples: validated, and run through `kftrain launch --local` with a local program."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kftrain.job import load_manifest_file
from testbed import REPO_ROOT
from testbed.needs import requires

pytestmark = requires("tensorflow", reason="the example program needs tensorflow")

REPO = REPO_ROOT
KFTRAIN = str(Path(sys.executable).parent / "kftrain")
ECHO = "python examples/tf_config_echo.py"
EXAMPLES = {
    "training-operator-v1.9.0_tensorflow_simple.yaml": {"worker": 2},
    "training-operator-v1.9.0_tensorflow_multi_worker_tfjob.yaml": {"worker": 2},
    "training-operator-v1.9.0_tensorflow_dist-mnist_tf_job_mnist.yaml": {"chief": 1, "ps": 1, "worker": 2},
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_loads_and_validates(example_manifests, crd_schemas, name):
    from kftrain.job import render_manifest

    job = load_manifest_file(example_manifests[name])
    assert job.kind == "TFJob"
    assert {t.lower(): s.count for t, s in job.replica_specs.items()} == EXAMPLES[name]
    crd_schemas.validate(render_manifest(job))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_locally_with_the_echo_program(example_manifests, name, tmp_path):
    proc = subprocess.run(
        [KFTRAIN, "launch", "-f", str(example_manifests[name]), "--local", "--command", ECHO, "--timeout", "150",
         "--workdir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "job Succeeded" in log
    replicas = [f"{t}-{i}" for t, n in EXAMPLES[name].items() for i in range(n)]
    for label in replicas:
        assert re.search(rf'\[{label}\] TF_CONFIG=\{{"cluster"', log), f"{label} printed no TF_CONFIG"
    if "ps" in EXAMPLES[name]:
        assert "summed from the workers = 3" in log
        # PS and workers serve forever: the local backend stops them once the chief succeeds.
        assert "chief-0 succeeded" in log
        assert "ps-0 succeeded" not in log and "worker-0 succeeded" not in log
        leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
        assert not leftovers
    else:
        assert log.count("all-reduce over 2 replicas = 3") == 2

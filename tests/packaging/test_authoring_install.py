"""The authoring install: ``pip install kftrain`` with no extras is enough to compile and submit every pipeline.

A throwaway venv gets this checkout with no extras (from the package indexes pip is configured with, its cache
and the lock's versions); no ML framework may come with it. Its own ``kftrain`` command then compiles every
shipped pipeline and component (the result must equal the committed YAML) and submits every shipped pipeline
to a fake KFP API server (testbed/fake_kfp), each from a process that sees only the venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import REPO_ROOT
from testbed.fake_kfp import FakeKFP

ROOT = REPO_ROOT
FRAMEWORKS = ("torch", "tensorflow", "tf_keras", "keras", "numpy", "pyarrow", "sklearn", "onnx", "onnxruntime")

pytestmark = pytest.mark.slow  # a venv and a pip install


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("authoring") / "venv"
    # The package's source only: a build from the checkout itself would reuse a stale build/ folder.
    source = where.parent / "source"
    ignored = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "runs", "local_outputs")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*ignored))
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    proc = subprocess.run(
        [str(where / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), str(source)],
        capture_output=True, text=True, timeout=1200, env=clean_env(where.parent),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return where


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell: nothing of this checkout on the path, a home of its own."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "KFP_HOST", "KFP_NAMESPACE", "KFP_TOKEN", "KFTRAIN_IMAGE_REGISTRY"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(home)  # no ~/.config/kfp/context.json of the developer's
    return env


def run(venv: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=clean_env(venv.parent),
    )


@pytest.fixture
def kfp_server() -> Iterator[FakeKFP]:
    server = FakeKFP().start()
    yield server
    server.stop()


def test_the_authoring_install_has_no_ml_framework(venv: Path) -> None:
    code = "import importlib.util as u, json, sys; print(json.dumps([m for m in sys.argv[1:] if u.find_spec(m)]))"
    proc = run(venv, "python", "-c", code, *FRAMEWORKS, cwd=venv.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    # And its kftrain is the installed one, not this checkout.
    proc = run(venv, "python", "-c", "import kftrain; print(kftrain.__file__)", cwd=venv.parent)
    assert str(venv) in proc.stdout, proc.stdout


def test_it_compiles_every_shipped_pipeline_and_component_as_committed(venv: Path) -> None:
    proc = run(venv, "kftrain", "compile", "--check", "--root", str(ROOT), cwd=venv.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_it_submits_every_shipped_pipeline(venv: Path, kfp_server: FakeKFP) -> None:
    listing = "from kftrain.cli.pipelines import shipped_pipelines; print(' '.join(sorted(shipped_pipelines())))"
    names = run(venv, "python", "-c", listing, cwd=venv.parent).stdout.split()
    assert len(names) >= 4, names
    # A parameter of each: the digits pipelines' epochs; the generic pipeline runs the user's program, so its own.
    params = {name: ("epochs", "1", 1) for name in names} | {"train-evaluate-export": ("workers", "2", 2)}
    for name in names:
        key, text, _ = params[name]
        proc = run(
            venv, "kftrain", "submit", name, "--host", kfp_server.url, "--param", f"{key}={text}", cwd=venv.parent
        )
        assert proc.returncode == 0, f"{name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    uploads = [call.query["name"] for call in kfp_server.calls("POST", "/pipelines/upload")]
    assert sorted(uploads) == names
    runs = kfp_server.calls("POST", "/runs")
    assert len(runs) == len(names)
    # Runs are submitted in the order of names.
    assert [r.body["runtime_config"]["parameters"] for r in runs] == [{params[n][0]: params[n][2]} for n in names]

"""The README's "Your own pipeline" path, as a user plays it: examples/own_pipeline runs from its folder with
``kftrain run my_pipeline:my_pipeline`` (the module found in the current folder, after the standard library), and a
module of the user's written as the README shows compiles (``kftrain compile my_pipeline:my_pipeline``, with the
images' registry and pull secrets) and submits (``kftrain submit my_pipeline:my_pipeline --host ...``) to a KFP API
server (testbed.fake_kfp) as the same file; what cannot be found is one line naming it, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kftrain import __version__
from testbed import REPO_ROOT
from testbed.fake_kfp import FakeKFP

REPO = REPO_ROOT
EXAMPLE = REPO / "examples" / "own_pipeline"


def kftrain(
    *args: str, cwd: Path, timeout: float = 120, tmp: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The ``kftrain`` command as a user runs it: its script's folder, not the current one, starts its path."""
    script = Path(sys.executable).with_name("kftrain")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kftrain.cli"]
    env = {**os.environ, **({"TMPDIR": str(tmp)} if tmp else {}), **(env or {})}
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_the_readme_example_runs_from_its_folder(tmp_path: Path) -> None:
    proc = kftrain(
        "run", "my_pipeline:my_pipeline", "--pipeline-root", str(tmp_path / "runs"), cwd=EXAMPLE, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[kftrain] describe-model: finished" in proc.stdout
    assert "pipeline my_pipeline:my_pipeline succeeded" in proc.stdout
    (model,) = (tmp_path / "runs").glob("my-pipeline-*/pytorchjob-launch/model")
    assert (model / "model.pt").is_file()
    assert not (EXAMPLE / "runs").exists()


@pytest.mark.parametrize(
    ("pipeline", "cwd", "message"),
    [
        ("my_pipeline:my_pipeline", REPO, "no module named 'my_pipeline' in the current folder"),
        ("my_pipeline:nothing", EXAMPLE, "has no 'nothing'"),
        ("my_pipeline:describe_model", EXAMPLE, "not a pipeline"),
        ("no_such_module:pipe", EXAMPLE, "no module named 'no_such_module'"),
    ],
)
def test_a_pipeline_that_cannot_be_loaded_is_one_line_naming_it(pipeline: str, cwd: Path, message: str) -> None:
    proc = kftrain("run", pipeline, "--pipeline-root", "/nonexistent/never-written", cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# A training script of the user's that needs no framework: rank 0 writes the model, as the example's DDP script does.
QUICK_TRAIN = """
import os
if os.environ["RANK"] == "0":
    out = os.environ["KFTRAIN_MODEL_URI"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.pt"), "wb") as handle:
        handle.write(b"weights")
print("KFTRAIN_METRICS {\\"step\\": 1, \\"loss\\": 0.5}", flush=True)
"""
REGISTRY = "registry.example.com/team"


@pytest.fixture
def kfp_server(tmp_path: Path) -> Iterator[FakeKFP]:
    server = FakeKFP().start()
    yield server
    server.stop()


def test_the_readme_path_runs_compiles_and_submits_a_module_of_ones_own(tmp_path: Path, kfp_server: FakeKFP) -> None:
    """Write the pipeline module as the README does, run it here, compile it for a registry that needs a pull secret,
    then submit and schedule it: the server gets the file ``kftrain compile`` wrote, and the run its parameters."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_pipeline.py").write_text((EXAMPLE / "my_pipeline.py").read_text())
    (project / "train.py").write_text(QUICK_TRAIN)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # Hermetic: no KFP context of this machine's user, no server of the environment's.
    env = {"HOME": str(tmp_path), "KFTRAIN_STATE_DIR": str(tmp_path / "state")}
    env.update({name: "" for name in ("KFP_HOST", "KFP_NAMESPACE", "KFP_TOKEN")})
    cluster = {**env, "KFTRAIN_IMAGE_REGISTRY": REGISTRY, "KFTRAIN_IMAGE_PULL_SECRETS": "regcred"}

    # 1. Locally: cd project && kftrain run my_pipeline:my_pipeline --param workers=2
    ran = kftrain("run", "my_pipeline:my_pipeline", "--param", "workers=2", cwd=project, tmp=tmp, env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "[kftrain] describe-model: finished" in ran.stdout
    (run_dir,) = (project / "runs").glob("my-pipeline-*")
    assert (run_dir / "pytorchjob-launch" / "model" / "model.pt").read_bytes() == b"weights"
    described = json.loads((run_dir / "describe-model" / "executor_output.json").read_text())
    assert described["parameterValues"]["Output"] == "model.pt"  # the step of the user's own read the model

    # 2. For the cluster: KFTRAIN_IMAGE_REGISTRY=... KFTRAIN_IMAGE_PULL_SECRETS=regcred kftrain compile my_pipeline:...
    compiled = kftrain("compile", "my_pipeline:my_pipeline", cwd=project, tmp=tmp, env=cluster)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.startswith(
        f"wrote my-pipeline.yaml: pipeline my-pipeline; kftrain's step images from {REGISTRY}"
    )
    spec, platform = yaml.safe_load_all((project / "my-pipeline.yaml").read_text())
    executors = spec["deploymentSpec"]["executors"]
    assert executors["exec-pytorchjob-launch"]["container"]["image"] == f"{REGISTRY}/python-launch:{__version__}"
    secrets = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert {name: [s["secretName"] for s in secrets[name]["imagePullSecret"]] for name in executors} == {
        name: ["regcred"] for name in executors
    }

    # 3. kftrain submit my_pipeline:my_pipeline --host ... --param image=<an image with train.py>
    server = ["--host", kfp_server.url]
    image = f"{REGISTRY}/my-trainer:1"
    submitted = kftrain(
        "submit", "my_pipeline:my_pipeline", *server, "--param", f"image={image}", cwd=project, tmp=tmp, env=cluster
    )
    assert submitted.returncode == 0, submitted.stderr
    upload = kfp_server.calls("POST", "/pipelines/upload")[0]
    assert upload.query["name"] == "my-pipeline"
    assert upload.files["uploadfile"] == ("my-pipeline.yaml", (project / "my-pipeline.yaml").read_bytes())
    run = kfp_server.calls("POST", "/runs")[0].body
    assert run["runtime_config"]["parameters"] == {"image": image}

    # Again, and on a schedule: a new version named by the package, the commit and the compiled file's content.
    again = kftrain(
        "schedule",
        "create",
        "my_pipeline:my_pipeline",
        *server,
        "--cron",
        "0 0 3 * * *",
        cwd=project,
        tmp=tmp,
        env=cluster,
    )
    assert again.returncode == 0, again.stderr
    (version,) = kfp_server.calls("POST", "/pipelines/upload_version")
    assert re.fullmatch(rf"{re.escape(__version__)}-\w+-[0-9a-f]{{8}}", version.query["name"]), version.query
    assert version.files["uploadfile"][1] == (project / "my-pipeline.yaml").read_bytes()
    assert kfp_server.calls("POST", "/recurringruns")
    assert sorted(p.name for p in tmp.iterdir()) == []  # nothing of the run or of the compiles left behind

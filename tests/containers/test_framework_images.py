"""Each framework image's environment, slimmed as its build slims it (the one P8 measures), runs its steps'
smallest case: the trainer for one epoch on digits, then (the PyTorch and TensorFlow images) evaluation and export
of the model it wrote. Every program runs in ``python -S`` with only this checkout and the slimmed folder on its
path (and, for a Horovod image, Horovod's files from the test venv's cached build), so a removal that broke
something a step loads fails here. The CUDA variants are import-checked by P8 only: nothing here has a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.steps.prep import prepare_dataset
from testbed import REPO_ROOT
from testbed.scripts import load_script

ROOT = REPO_ROOT
bench_images = load_script("bench/bench_images.py", "bench_images")

pytestmark = pytest.mark.slow  # installs each image's requirement set with pip (cached after the first run)

# Evaluation and export of the model the trainer wrote, as the steps run them; the file each module was loaded
# from, so the test can see the slimmed folder provided them.
EVALUATE_AND_EXPORT = textwrap.dedent(
    """
    import json, sys
    from kftrain.steps.evaluate import evaluate_model
    from kftrain.steps.export import export_model
    model, dataset, out, framework = sys.argv[1:5]
    evaluation = evaluate_model(model, dataset)
    report = export_model(model, dataset, out, model_name="digits")
    print(json.dumps({"accuracy": evaluation.metrics["accuracy"], "rows": evaluation.rows,
                      "framework": sys.modules[framework].__file__, "exported": [e.target for e in report.exports]}))
    """
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("data") / "digits")
    prepare_dataset(uri, seed=42)
    return uri


def run_isolated(path: list[Path], argv: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> str:
    """``python -S`` (or mpirun of it) with ``path`` alone as its module path; its stdout, once it succeeded."""
    isolated = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (env or {})
    isolated["PYTHONPATH"] = os.pathsep.join(map(str, path))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=isolated)
    assert proc.returncode == 0, f"{argv[:6]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def trainer(module: str, dataset: str, model: Path) -> list[str]:
    return [sys.executable, "-S", "-m", module, "--dataset", dataset, "--model-dir", str(model), "--epochs", "1"]


def installed(image: str) -> Path:
    """The image's slimmed environment; a skip naming the build when no index pip reaches here serves it."""
    try:
        return bench_images.install(image)
    except bench_images.WheelUnavailable as exc:
        pytest.skip(str(exc))


# Each image: the program it trains with, and the module of its framework (Horovod's: horovod.<framework>).
PROGRAMS = {
    "pytorch-cpu": ("kftrain.programs.torch_ddp", "torch"),
    "tensorflow-cpu": ("kftrain.programs.tf_distributed", "tensorflow"),
    "horovod-pytorch-cpu": ("kftrain.programs.horovod_torch", "torch"),
    "horovod-tensorflow-cpu": ("kftrain.programs.horovod_tf", "tf"),
}


@pytest.mark.parametrize("image", ["pytorch-cpu", "tensorflow-cpu"])
def test_the_slimmed_framework_image_trains_evaluates_and_exports(image, dataset, tmp_path):
    module, framework = PROGRAMS[image]
    site = installed(image)
    assert not (site / framework / "include").exists()  # slimmed as the image's build slims it
    path = [ROOT, site]
    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}  # the TensorFlow image's ENV
    run_isolated(path, trainer(module, dataset, tmp_path / "model"), tmp_path, env)
    out = run_isolated(
        path,
        [sys.executable, "-S", "-c", EVALUATE_AND_EXPORT, str(tmp_path / "model"), dataset, str(tmp_path / "out"),
         framework],
        tmp_path,
        env,
    )  # fmt: skip
    found = json.loads(out.strip().splitlines()[-1])
    assert found["framework"].startswith(str(site)), found  # the framework came from the slimmed folder
    assert found["rows"] == 359 and found["accuracy"] > 0.5, found
    assert found["exported"], found


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun missing (scripts/install_mpi.sh)")
@pytest.mark.parametrize("image", ["horovod-pytorch-cpu", "horovod-tensorflow-cpu"])
def test_the_slimmed_horovod_image_trains_with_its_one_framework(image, dataset, tmp_path):
    module, framework = PROGRAMS[image]
    site = installed(image)
    other = {"torch": "tensorflow", "tf": "torch"}[framework]
    assert not (site / other).exists(), f"python-{image} carries {other}"
    horovod = bench_images.horovod_files(framework, bench_images.slim_options(image.rsplit("-", 1)[0]))
    if horovod is None:
        pytest.skip(f"no cached Horovod build in {bench_images.WHEELS} (scripts/build_horovod.sh)")
    env = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    run_isolated(
        [ROOT, site, horovod], ["mpirun", "-n", "1", *trainer(module, dataset, tmp_path / "model")], tmp_path, env
    )
    assert (tmp_path / "model" / "model.json").is_file()

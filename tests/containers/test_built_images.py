"""The light images (launch, data) built for real by ``scripts/build_images.sh`` (buildah, FROM the base
``scripts/build_base_image.sh`` makes, each cached by its inputs) and run with podman (runc): the entry point, KFP's
executor entry and the steps' modules, as the image's user. Slow: cold (the base image too) about 4 minutes on a
quiet 2-core machine, 13 under a load of 13; warm, seconds. The framework images (GBs each) are built by ``make
images`` and bench P8, not here. Skipped where the image tools cannot run (not root: the project's storage uses the
kernel's overlay)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kftrain import __version__, images
from testbed import REPO_ROOT
from testbed.dockerfiles import image_env

pytestmark = pytest.mark.slow

BUILD = REPO_ROOT / "scripts" / "build_images.sh"
LIGHT = {"launch": images.image(images.LAUNCH), "data": images.image(images.DATA)}
# The modules each image's steps start with (as its Dockerfile's own check imports them).
STEP_MODULES = {"launch": "kftrain.launch.component", "data": "kftrain.steps.prep"}
# A cold build of the base and both images on a loaded 2-core machine: 12.4 min measured (docs/install.md, Images).
BUILD_TIMEOUT_S = 1100


def _mounts_under(path: str) -> set[str]:
    return {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if path in line.split()[1]}


def _container_mounts(env: dict[str, str]) -> set[str]:
    """The root folders of the containers mounted now (a build running beside the tests has some)."""
    out = subprocess.run(["podman", "mount"], env=env, capture_output=True, text=True, check=True).stdout
    return {line.split()[1] for line in out.splitlines() if len(line.split()) == 2}


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, str]]:
    """The image settings; after the module, no container of this module's is left and no mount it made."""
    if os.geteuid() != 0:
        pytest.skip("the project's image storage (overlay) and the base image's mmdebstrap need root")
    if shutil.which("buildah") is None and shutil.which("apt-get") is None:
        pytest.skip("no buildah here, and no apt-get to install it (scripts/install_image_tools.sh)")
    env = image_env()
    env["KFTRAIN_TEST_LABEL"] = f"org.kftrain.test={uuid.uuid4().hex}"
    storage = env["KFTRAIN_IMAGE_CACHE"]
    before = _mounts_under(storage)
    yield env
    if shutil.which("podman"):
        left = subprocess.run(
            ["podman", "ps", "--all", "--quiet", "--filter", f"label={env['KFTRAIN_TEST_LABEL']}"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert not left, f"containers left behind: {left}"
        left = sorted(_mounts_under(storage) - before - _container_mounts(env))
        assert not left, f"mounts left under the image storage: {left}"


def _build(env: dict[str, str]) -> str:
    proc = subprocess.run(
        [str(BUILD), *LIGHT],
        cwd=REPO_ROOT,
        env={**env, "PY": sys.executable},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"build_images.sh failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def built(env: dict[str, str]) -> dict[str, str]:
    """The launch and data images, built (or found current) from this checkout."""
    _build(env)
    return LIGHT


def _run(env: dict[str, str], image: str, *args: str, entrypoint: str | None = None) -> str:
    """``podman run --rm`` with no network; the container's standard output (it must end with status 0)."""
    command = ["podman", "run", "--rm", "--network", "none", "--label", env["KFTRAIN_TEST_LABEL"]]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    proc = subprocess.run([*command, image, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args} in {image}: status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("name", list(LIGHT))
def test_the_entry_point_runs(env: dict[str, str], built: dict[str, str], name: str) -> None:
    assert _run(env, built[name], "--help").startswith("usage: kftrain")


@pytest.mark.parametrize("name", list(LIGHT))
def test_kfp_executor_entry_runs(env: dict[str, str], built: dict[str, str], name: str) -> None:
    out = _run(env, built[name], "-m", "kfp.dsl.executor_main", "--help", entrypoint="python")
    assert "--executor_input" in out


@pytest.mark.parametrize("name", list(LIGHT))
def test_the_steps_load_as_the_unprivileged_user(env: dict[str, str], built: dict[str, str], name: str) -> None:
    script = (
        f"import os, sys, kftrain, {STEP_MODULES[name]}; print(os.getuid(), sys.version_info[:2], kftrain.__version__)"
    )
    out = _run(env, built[name], "-c", script, entrypoint="python")
    assert out.split("\n")[0] == f"1000 (3, 11) {__version__}"


def test_the_data_image_carries_the_baked_samples(env: dict[str, str], built: dict[str, str]) -> None:
    script = "import os; d = os.environ['KFTRAIN_SAMPLES_DIR']; print(sorted(os.listdir(d)))"
    out = _run(env, built["data"], "-c", script, entrypoint="python")
    assert "'digits.parquet'" in out, out


def test_a_warm_build_rebuilds_nothing(env: dict[str, str], built: dict[str, str]) -> None:
    out = _build(env)
    for ref in built.values():
        assert f"{ref} is current" in out, out
    assert "building" not in out, out


# A framework image is not built here (GBs, and a cold build past the tier's budget: P8), but where `make images`
# built it, its trainer's modules load and compute on the CPU (a cuda variant's wheels run without a GPU).
FRAMEWORK_CHECKS = {  # image: (program, the last line it prints)
    images.image(images.PYTORCH, images.CUDA): (
        "import torch, kftrain.programs.torch_ddp; print(float(torch.ones(3).sum()), torch.cuda.is_available())",
        "3.0 False",
    ),
    images.image(images.TENSORFLOW, images.CPU): (
        "import tensorflow as tf, kftrain.programs.tf_distributed; "
        "print(float(tf.reduce_sum(tf.ones(3))), bool(tf.config.list_physical_devices('GPU')))",
        "3.0 False",
    ),
    images.image(images.HOROVOD_TENSORFLOW, images.CPU): (
        "import tensorflow as tf, horovod.tensorflow as hvd, kftrain.programs.horovod_tf; hvd.init(); "
        "print(float(tf.reduce_sum(hvd.allreduce(tf.ones(3)))), hvd.size())",
        "3.0 1",
    ),
}


@pytest.mark.parametrize("ref", list(FRAMEWORK_CHECKS))
def test_a_framework_image_built_here_computes_on_the_cpu(env: dict[str, str], ref: str) -> None:
    found = subprocess.run(["podman", "image", "exists", ref], env=env, capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"{ref} is not built here (make images builds it)")
    program, expected = FRAMEWORK_CHECKS[ref]
    out = _run(env, ref, "-c", program, entrypoint="python")
    assert out.strip().splitlines()[-1] == expected, out

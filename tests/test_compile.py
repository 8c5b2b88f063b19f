"""Compiled pipeline.yaml / component.yaml are golden files: deterministic and committed up to date."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kftrain import __version__
from kftrain.cli.compile import compile_all, compile_to_text, discover
from kftrain.errors import KftrainError

ROOT = Path(__file__).resolve().parents[1]
TARGETS = discover(ROOT)


def test_every_component_and_pipeline_is_discovered():
    names = {t.source.parent.name for t in TARGETS}
    assert {"prepare_dataset", "pytorchjob_launch", "evaluate_classifier", "export_model", "pytorch_digits"} <= names
    assert all(t.output.exists() for t in TARGETS), [str(t.output) for t in TARGETS if not t.output.exists()]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.output.relative_to(ROOT)))
def test_compiled_file_is_committed_and_deterministic(target):
    first = compile_to_text(target)
    assert compile_to_text(target) == first, "compiling twice gave different bytes"
    assert target.output.read_text() == first, (
        f"{target.output.relative_to(ROOT)} is stale: run `make compile` and commit it"
    )


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.output.relative_to(ROOT)))
def test_images_are_pinned_to_the_package_version(target):
    spec = yaml.safe_load(target.output.read_text())
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    images = [e["container"]["image"] for e in executors.values()]
    assert images, "no executor images found"
    for image in images:
        assert image.endswith(f":{__version__}"), image
        assert ":latest" not in image


def test_check_mode_reports_stale_files_by_name(tmp_path):
    # A copy of the tree with one compiled file altered must be reported, and nothing written.
    import shutil

    for folder in ("components", "pipelines"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    victim = tmp_path / "pipelines/training/pytorch_digits/pipeline.yaml"
    victim.write_text(victim.read_text() + "# edited\n")
    stale = compile_all(tmp_path, write=False)
    assert stale == [victim]
    assert victim.read_text().endswith("# edited\n")


def test_regenerating_is_refused_in_ci(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(KftrainError, match="refusing to regenerate"):
        compile_all(tmp_path, write=True)


def test_compile_cli_check_passes_on_the_committed_tree():
    env = {**os.environ, "CI": "true"}
    env.pop("KFTRAIN_IMAGE_REGISTRY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "compile", "--check", "--root", str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr

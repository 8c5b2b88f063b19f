"""Compiled pipeline.yaml / component.yaml are golden files: deterministic and committed up to date."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain import __version__
from kftrain.cli.compile import compile_all, compile_to_text, discover
from kftrain.errors import KftrainError
from testbed import REPO_ROOT

ROOT = REPO_ROOT
TARGETS = discover(ROOT)


def test_every_component_and_pipeline_is_discovered():
    names = {t.source.parent.name for t in TARGETS}
    assert {"prepare_dataset", "pytorchjob_launch", "evaluate_model", "export_model", "pytorch_digits"} <= names
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
    spec = next(yaml.safe_load_all(target.output.read_text()))  # then the platform spec, if any
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


def _compile_check(root: Path) -> subprocess.CompletedProcess[str]:
    """``kftrain compile --check --root ROOT`` as CI runs it (no registry override)."""
    env = {**os.environ, "CI": "true"}
    env.pop("KFTRAIN_IMAGE_REGISTRY", None)
    return subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "compile", "--check", "--root", str(root)],
        capture_output=True,
        text=True,
        env=env,
    )


def test_check_of_a_folder_that_is_no_checkout_fails_by_name(tmp_path):
    (tmp_path / "pipelines").mkdir()
    proc = _compile_check(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"--root {tmp_path}: no components/ folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_compile_cli_check_passes_on_the_committed_tree():
    proc = _compile_check(ROOT)
    assert proc.returncode == 0, proc.stderr


def _constants(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``runtimeValue.constant`` in a compiled spec, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "runtimeValue" and isinstance(value, dict) and "constant" in value:
                yield path, value["constant"]
            else:
                yield from _constants(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _constants(value, f"{path}[{i}]")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: str(t.output.relative_to(ROOT)))
def test_no_pipeline_parameter_hides_in_a_constant(target):
    """KFP's backend driver hands a task a constant as it is (backend/src/v2/driver/resolve.go): a parameter
    placeholder inside a constant list, dict or string reaches the step as literal text on a cluster, although
    KFP's local runner fills it. Every parameter must be a task input of its own."""
    found = [
        f"{path}: {text}"
        for path, constant in _constants(list(yaml.safe_load_all(target.output.read_text())))
        for text in _strings(constant)
        if "{{$.inputs.parameters[" in text or "{{channel:" in text
    ]
    assert not found, "\n".join(found)


def test_the_constant_check_catches_a_parameter_in_a_list(tmp_path):
    """The check above is not vacuous: the old way of passing trainer flags is caught."""
    from kfp import compiler, dsl

    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch

    source = "def bad(epochs: int = 3):\n    pytorchjob_launch(args=['--epochs', epochs])\n"
    namespace = {"pytorchjob_launch": pytorchjob_launch}
    exec(compile(source, "<bad pipeline>", "exec", dont_inherit=True), namespace)  # KFP reads real annotations
    bad = dsl.pipeline(name="bad")(namespace["bad"])
    out = tmp_path / "bad.yaml"
    compiler.Compiler().compile(bad, str(out))
    texts = [t for _, c in _constants(list(yaml.safe_load_all(out.read_text()))) for t in _strings(c)]
    assert any("{{$.inputs.parameters[" in t for t in texts), texts


USERS_PIPELINE = """
from kfp import dsl, kubernetes

@dsl.component(base_image="python:3.11")
def one(a: int) -> int:
    return a

@dsl.pipeline(name="inner")
def inner(a: int) -> None:
    one(a=a)

@dsl.pipeline(name="outer")
def outer(a: int = 1) -> None:
    one(a=a)
    inner(a=a)
    own = one(a=a)
    kubernetes.set_image_pull_secrets(own, ["its-own"])
"""


@pytest.mark.parametrize(
    ("pull_secrets", "expected"),
    [
        pytest.param(
            "regcred,other",
            {"exec-one": ["regcred", "other"], "exec-one-2": ["regcred", "other"], "exec-one-2-2": ["its-own"]},
            id="every-step-nested-too-its-own-kept",
        ),
        pytest.param("", {"exec-one-2-2": ["its-own"]}, id="none-set"),
    ],
)
def test_compile_of_a_users_pipeline_gives_every_step_the_pull_secrets(
    tmp_path: Path, pull_secrets: str, expected: dict[str, list[str]]
) -> None:
    """KFTRAIN_IMAGE_PULL_SECRETS reaches a user's pipeline as it reaches the shipped ones (``kfp dsl compile``
    leaves it out): ``kftrain compile path/to/file.py:FUNCTION -o FILE``."""
    (tmp_path / "users.py").write_text(USERS_PIPELINE)
    env = {**os.environ, "KFTRAIN_IMAGE_PULL_SECRETS": pull_secrets, "KFTRAIN_IMAGE_REGISTRY": "r.example.com/k"}
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "compile", "users.py:outer", "-o", "outer.yaml"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"pull secrets of every step: {pull_secrets.replace(',', ', ') or 'none'}" in proc.stdout
    docs = list(yaml.safe_load_all((tmp_path / "outer.yaml").read_text()))
    # Three steps: the outer pipeline's two, the nested one's (its labels are KFP's).
    assert set(docs[0]["deploymentSpec"]["executors"]) == {"exec-one", "exec-one-2", "exec-one-2-2"}
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] if len(docs) > 1 else {}
    given = {name: [s["secretName"] for s in config.get("imagePullSecret", [])] for name, config in platform.items()}
    assert {name: names for name, names in given.items() if names} == expected

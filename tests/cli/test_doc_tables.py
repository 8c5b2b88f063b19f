"""The README's table of the train-evaluate-export pipeline's parameters is generated from the pipeline: up to date
in the committed README, named by ``kftrain compile --check`` when stale, rewritten by ``kftrain compile``, and never
regenerated in CI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kftrain.cli import readme_params
from kftrain.cli.compile import compile_all, compiled_object, discover
from kftrain.errors import KftrainError
from testbed import REPO_ROOT

ROOT = REPO_ROOT
(GENERIC,) = [t for t in discover(ROOT) if t.source.parent.name == readme_params.PIPELINE]


def committed_table() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(readme_params.BEGIN, 1)[1].split(readme_params.END, 1)[0].strip()


def test_the_readme_table_is_the_pipelines_parameters() -> None:
    pipeline = compiled_object(GENERIC)
    assert committed_table() == readme_params.parameter_table(pipeline)
    names = [line.split("`")[1] for line in committed_table().splitlines()[2:]]
    assert names == list(pipeline.component_spec.inputs)  # every parameter, in the signature's order


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder in ("components", "pipelines"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("| `seed` | Integer | `42` |", "| `seed` | Integer | `7` |"),  # a default changed
        lambda t: t.replace(readme_params.END, "| `gone` | String | `` | removed |\n" + readme_params.END),
        lambda t: t.replace("| `task` |", "| `kind` |"),
    ],
    ids=["default", "extra-row", "renamed"],
)
def test_a_stale_table_is_named_by_the_check_and_rewritten_by_compile(tree: Path, edit, monkeypatch) -> None:
    readme = tree / "README.md"
    readme.write_text(edit(readme.read_text()))
    stale_text = readme.read_text()
    assert compile_all(tree, write=False) == [readme]
    assert readme.read_text() == stale_text  # --check writes nothing
    monkeypatch.setenv("CI", "true")
    with pytest.raises(KftrainError, match="refusing to regenerate"):
        compile_all(tree, write=True)
    monkeypatch.delenv("CI")
    assert compile_all(tree, write=True) == [readme]
    assert readme.read_text() == (ROOT / "README.md").read_text()


def test_a_readme_without_the_markers_is_an_error_naming_them(tree: Path) -> None:
    readme = tree / "README.md"
    readme.write_text(readme.read_text().replace(readme_params.END, ""))
    with pytest.raises(KftrainError, match="must hold the markers"):
        compile_all(tree, write=False)

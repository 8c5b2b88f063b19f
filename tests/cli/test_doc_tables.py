"""The documentation's table of the train-evaluate-export pipeline's parameters (docs/pipelines.md) is generated from
the pipeline: up to date in the committed page, named by ``kftrain compile --check`` when stale, rewritten by
``kftrain compile``, and never regenerated in CI. The hand-written table of the platform parameters (docs/cluster.md)
states each default as the launch components and every shipped pipeline declare it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kftrain.cli import doc_tables
from kftrain.cli.compile import compile_all, compiled_object, discover
from kftrain.errors import KftrainError
from kftrain.job.kinds import KINDS
from kftrain.launch.inputs import launch_inputs, platform_inputs
from testbed import REPO_ROOT

ROOT = REPO_ROOT
(GENERIC,) = [t for t in discover(ROOT) if t.source.parent.name == doc_tables.PIPELINE]


def committed_table() -> str:
    text = (ROOT / doc_tables.PARAMETERS_DOC).read_text()
    return text.split(doc_tables.BEGIN, 1)[1].split(doc_tables.END, 1)[0].strip()


def test_the_docs_table_is_the_pipelines_parameters() -> None:
    pipeline = compiled_object(GENERIC)
    assert committed_table() == doc_tables.parameter_table(pipeline)
    names = [line.split("`")[1] for line in committed_table().splitlines()[2:]]
    assert names == list(pipeline.component_spec.inputs)  # every parameter, in the signature's order


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder in ("components", "pipelines"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / doc_tables.PARAMETERS_DOC, tmp_path / doc_tables.PARAMETERS_DOC)
    return tmp_path


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("| `seed` | Integer | `42` |", "| `seed` | Integer | `7` |"),  # a default changed
        lambda t: t.replace(doc_tables.END, "| `gone` | String | `` | removed |\n" + doc_tables.END),
        lambda t: t.replace("| `task` |", "| `kind` |"),
    ],
    ids=["default", "extra-row", "renamed"],
)
def test_a_stale_table_is_named_by_the_check_and_rewritten_by_compile(tree: Path, edit, monkeypatch) -> None:
    readme = tree / doc_tables.PARAMETERS_DOC
    readme.write_text(edit(readme.read_text()))
    stale_text = readme.read_text()
    assert compile_all(tree, write=False) == [readme]
    assert readme.read_text() == stale_text  # --check writes nothing
    monkeypatch.setenv("CI", "true")
    with pytest.raises(KftrainError, match="refusing to regenerate"):
        compile_all(tree, write=True)
    monkeypatch.delenv("CI")
    assert compile_all(tree, write=True) == [readme]
    assert readme.read_text() == (ROOT / doc_tables.PARAMETERS_DOC).read_text()


def test_a_page_without_the_markers_is_an_error_naming_them(tree: Path) -> None:
    readme = tree / doc_tables.PARAMETERS_DOC
    readme.write_text(readme.read_text().replace(doc_tables.END, ""))
    with pytest.raises(KftrainError, match="must hold the markers"):
        compile_all(tree, write=False)


# --- the platform table: every default it states is the code's ----------------------------------------------------

PIPELINES = [t for t in discover(ROOT) if t.is_pipeline]


def defaults_in_code(name: str) -> list[tuple[str, object]]:
    """(where, default) of the input ``name``: the launch inputs' table, every kind's launch component, every shipped
    pipeline (each must expose it: the docs say every shipped pipeline does)."""
    found: list[tuple[str, object]] = [("the launch inputs", {i.name: i for i in platform_inputs()}[name].default)]
    for kind in KINDS:
        inputs = {i.name: i.default for i in launch_inputs(kind)}
        found.append((f"the {kind.spec.kind} {kind.spec.version} launch component", inputs[name]))
    for target in PIPELINES:
        inputs = compiled_object(target).component_spec.inputs  # type: ignore[attr-defined]
        found.append((f"pipeline {target.source.parent.name}", inputs[name].default if name in inputs else "(none)"))
    return found


def wrong_defaults(readme: str) -> list[str]:
    descriptions = {i.name: i.doc for i in platform_inputs()}
    wrong = []
    for name, written in doc_tables.platform_defaults(readme).items():
        if name not in descriptions:
            wrong.append(f"{name}: not a launch input")
            continue
        for where, value in defaults_in_code(name):
            if written not in doc_tables.documented_default(value, descriptions[name]):
                wrong.append(f"{name}: the docs say {written}, {where} has {value!r}")
    return wrong


def test_every_default_in_the_platform_table_is_the_components_and_the_pipelines() -> None:
    readme = (ROOT / doc_tables.PLATFORM_DOC).read_text()
    assert set(doc_tables.platform_defaults(readme)) >= {"backend", "storage_secret", "timeout_seconds"}
    assert wrong_defaults(readme) == []


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("| `timeout_seconds` | 3600 |", "| `timeout_seconds` | 7200 |", "timeout_seconds: the docs say 7200"),
        ("| `storage_secret` | `mlpipeline-minio-artifact` |", "| `storage_secret` | none |", "storage_secret"),
        ("| `backend` | `auto` |", "| `backend` | `local` |", "backend: the docs say `local`"),
        ("| `queue_name` | none |", "| `queue_name` | `default` |", "queue_name"),
    ],
    ids=["number", "secret", "string", "empty"],
)
def test_a_default_the_platform_table_misstates_is_named(old: str, new: str, named: str) -> None:
    readme = (ROOT / doc_tables.PLATFORM_DOC).read_text()
    assert old in readme
    wrong = wrong_defaults(readme.replace(old, new))
    assert wrong and all(w.startswith(named.split(":")[0]) for w in wrong) and named in wrong[0], wrong

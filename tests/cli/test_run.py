"""``kftrain run``'s list of outputs: an HTML output is printed as a link a browser renders."""

# No `from __future__ import annotations`: KFP reads the components' annotations as types.

import urllib.parse
from pathlib import Path

from kfp import dsl

from kftrain.cli.run import browsable, html_outputs


@dsl.component(base_image="python:3.11-slim")
def report(page: dsl.Output[dsl.HTML], data: dsl.Output[dsl.Dataset]) -> bool:
    return True


@dsl.component(base_image="python:3.11-slim")
def chart(page: dsl.Output[dsl.HTML]) -> None:
    pass


@dsl.pipeline(name="pages")
def pages() -> None:
    first = report()
    with dsl.If(first.outputs["Output"] == True):  # noqa: E712 (a KFP condition, not a Python comparison)
        chart()


def test_the_html_outputs_are_found_by_their_declared_type_in_every_dag() -> None:
    assert html_outputs(pages) == {("report", "page"), ("chart", "page")}


def test_an_html_output_is_printed_as_a_file_link_with_its_extension_its_artifact_left_as_it_is(
    tmp_path: Path,
) -> None:
    artifact = tmp_path / "step" / "curves"
    artifact.parent.mkdir()
    artifact.write_text("<!doctype html><p>curves</p>")
    for _ in range(2):  # a second listing of the same run finds its link there
        shown = browsable(artifact)
        assert shown.startswith("file://") and shown.endswith("/curves.html")
        opened = Path(urllib.parse.unquote(urllib.parse.urlparse(shown).path))
        assert opened.read_text() == "<!doctype html><p>curves</p>"
    assert artifact.is_file() and not artifact.is_symlink()
    assert sorted(p.name for p in artifact.parent.iterdir()) == ["curves", "curves.html"]

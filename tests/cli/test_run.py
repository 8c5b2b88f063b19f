"""``kftrain run``'s list of outputs: an HTML output is printed as a link a browser renders; the docs' sample run
is what the console prints."""

# No `from __future__ import annotations`: KFP reads the components' annotations as types.

import ast
import json
import re
import urllib.parse
from pathlib import Path

import pytest
from kfp import dsl

from kftrain.cli.quiet import QuietFilter
from kftrain.cli.reference import load_pipeline, parse_reference
from kftrain.cli.run import HTML_TYPE, browsable, html_outputs
from testbed.reference import REPO


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


# The sample output of `kftrain run pytorch-digits` in the docs (a real run's, pasted), checked against what the
# console code prints: the steps, the shape of each line, the outputs each finished line lists and their order.
SAMPLES = {"README.md": "excerpt", "docs/pipelines.md": "whole"}
_TIMING = re.compile(r"\b(finished|succeeded) in \d+\.\ds")
_PROGRESS = r"epoch \d+/\d+ loss [\d.e-]+ val_accuracy [\d.]+( \| [\d.]+ epoch/s)? \(master-0\)"
_SHAPES = [  # the run folder's absolute path shortened to "…"
    re.compile(r"\[kftrain\] (?P<step>[a-z0-9-]+): started"),
    re.compile(r"\[kftrain\] (?P<step>[a-z0-9-]+): finished in \d+\.\ds( \((?P<outputs>.+)\))?"),
    re.compile(r"\[kftrain\]   progress: " + _PROGRESS),
    re.compile(r""),
    re.compile(r"\[kftrain\] pipeline pytorch-digits succeeded in \d+\.\ds"),
    re.compile(r"\[kftrain\] outputs under …/runs:"),
    re.compile(r"  …/runs/pytorch-digits-[\d-]+/(?P<step>[a-z0-9-]+)/(?P<name>[a-z_-]+)"),
    re.compile(r"  file://…/runs/pytorch-digits-[\d-]+/(?P<step>[a-z0-9-]+)/(?P<name>[a-z_]+)\.html"),
    re.compile(r"  (?P<step>[a-z0-9-]+): [a-z0-9_]+ = [\d.e-]+"),
]


def sample(doc: str) -> list[str]:
    """The lines of the block in ``doc`` that holds the run's last line."""
    blocks: list[list[str]] = []
    inside = False
    for line in (REPO / doc).read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            blocks += [[]] if inside else []
        elif inside:
            blocks[-1].append(line)
    found = [b for b in blocks if any(line.startswith("[kftrain] pipeline pytorch-digits succeeded in") for line in b)]
    assert len(found) == 1, doc
    return found[0]


def declared() -> dict[str, tuple[dict[str, str], list[str]]]:
    """Each step of pytorch-digits: its artifact outputs (name -> type) and its output parameters' names."""
    spec = load_pipeline(parse_reference("pytorch-digits")).pipeline_spec
    steps = {}
    for dag in [spec.root.dag, *(c.dag for c in spec.components.values())]:
        for task, task_spec in dag.tasks.items():
            component = spec.components[task_spec.component_ref.name]
            if not component.dag.tasks:  # a condition or group, not a step
                outputs = component.output_definitions
                artifacts = {name: a.artifact_type.schema_title for name, a in outputs.artifacts.items()}
                steps[task] = (artifacts, list(outputs.parameters))
    return steps


def shown_by_the_console(tmp_path: Path, step: str, outputs: str) -> str:
    """The finished line the console prints for a step whose outputs are those ``outputs`` lists, given to it in
    the reverse order."""
    artifacts: dict[str, object] = {}
    params: dict[str, object] = {}
    for item in reversed(outputs.split(", ") if outputs else []):
        if item.startswith("metrics: "):
            meta = dict(pair.split("=") for pair in item.removeprefix("metrics: ").split())
            artifacts["metrics"] = {"artifacts": [{"metadata": {k: float(v) for k, v in meta.items()}}]}
        elif "=" in item:
            name, value = item.split("=", 1)
            params[name] = ast.literal_eval(value)
        else:
            artifacts[item] = {"artifacts": [{"uri": f"/runs/x/{step}/{item}"}]}
    out = tmp_path / f"{step}.json"
    out.write_text(json.dumps({"artifacts": artifacts, "parameterValues": params}))
    shown: list[str] = []
    quiet = QuietFilter(shown.append)
    quiet.feed(f"Executing task '{step}'\n")
    quiet.feed(f"    [KFP Executor]: Wrote executor output file to {out}.\n")
    quiet.feed(f"Task '{step}' finished with status SUCCESS\n")
    return shown[-1]


@pytest.mark.parametrize("doc", sorted(SAMPLES))
def test_the_docs_sample_run_is_what_the_console_prints(tmp_path: Path, doc: str) -> None:
    steps = declared()
    lines = sample(doc)
    matched = [(line, next((m for s in _SHAPES if (m := s.fullmatch(line))), None)) for line in lines]
    assert [line for line, m in matched if m is None] == []  # every line has a shape the console prints
    named = {m["step"] for _, m in matched if m is not None and "step" in m.groupdict()}
    assert named <= set(steps)
    finished = {m["step"]: line for line, m in matched if m is not None and ": finished in" in line}
    if SAMPLES[doc] == "whole":
        assert set(finished) == set(steps), lines
        html = {(step, name) for step, (outs, _) in steps.items() for name, kind in outs.items() if kind == HTML_TYPE}
        linked = {(m["step"], m["name"]) for line, m in matched if m is not None and line.startswith("  file://")}
        plain = {(m["step"], m["name"]) for line, m in matched if m is not None and line.startswith("  …/runs/")}
        assert linked == html and not plain & html  # every HTML output a link a browser renders, nothing else
    for step, line in finished.items():
        outputs = _SHAPES[1].fullmatch(line)["outputs"] or ""  # type: ignore[index]
        assert _TIMING.sub("", shown_by_the_console(tmp_path, step, outputs)) == _TIMING.sub("", line)
        names = [item.split(":")[0].split("=")[0] for item in outputs.split(", ")] if outputs else []
        artifacts, parameters = steps[step]
        assert [n for n in names if n in artifacts] == sorted(artifacts), line  # every artifact, in one order
        assert set(names) <= set(artifacts) | set(parameters), line

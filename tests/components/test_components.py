"""Every component: thin (module scope imports only kfp), documented, loadable from its YAML."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kfp import components

from kftrain.cli.compile import discover
from testbed import REPO_ROOT

ROOT = REPO_ROOT
COMPONENTS = [t for t in discover(ROOT) if not t.is_pipeline]
PIPELINES = [t for t in discover(ROOT) if t.is_pipeline]
# kfp itself imports the kubernetes client; anything else heavy must wait for the step's body. The launch
# components read their inputs from kftrain.launch.inputs (the job model, no backend) when they are defined.
HEAVY = (
    "torch",
    "tensorflow",
    "horovod",
    "kftrain.backends",
    "kftrain.programs",
    "kftrain.launch.component",
    "kftrain.launch.step",
    "pyarrow",
    "sklearn",
)


@pytest.mark.parametrize("target", COMPONENTS + PIPELINES, ids=lambda t: t.module)
def test_module_scope_imports_no_heavy_package(target):
    code = (
        "import importlib, json, sys\n"
        "import kfp.dsl\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({target.module!r})\n"
        "added = set(sys.modules) - before\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in added if m in heavy or m.split('.')[0] in heavy\n"
        "                        or any(m.startswith(h + '.') for h in heavy))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize("target", COMPONENTS + PIPELINES, ids=lambda t: t.module)
def test_has_a_readme(target):
    readme = target.source.with_name("README.md")
    assert readme.exists(), f"{readme.relative_to(ROOT)} missing"
    assert len(readme.read_text().split()) > 30


@pytest.mark.parametrize("target", COMPONENTS, ids=lambda t: t.module)
def test_component_yaml_loads_and_documents_every_input(target):
    import yaml

    component = components.load_component_from_file(str(target.output))
    assert component.component_spec.description
    assert component.component_spec.inputs
    # The loaded spec drops per-input descriptions; the YAML the UI reads must have them.
    spec = next(yaml.safe_load_all(target.output.read_text()))  # then the platform spec, if any
    (definition,) = spec["components"].values()
    inputs = {
        **definition["inputDefinitions"].get("parameters", {}),
        **definition["inputDefinitions"].get("artifacts", {}),
    }
    assert set(inputs) == set(component.component_spec.inputs)
    for name, inp in inputs.items():
        assert inp.get("description"), f"input {name} has no description"


@pytest.mark.parametrize("target", PIPELINES, ids=lambda t: t.module)
def test_pipeline_parameters_have_defaults_and_descriptions(target):
    import yaml

    spec = next(yaml.safe_load_all(target.output.read_text()))  # then the platform spec, if any
    params = spec["root"]["inputDefinitions"]["parameters"]
    for name, p in params.items():
        assert "defaultValue" in p, f"{name} has no default"
        assert p.get("description"), f"{name} has no description"

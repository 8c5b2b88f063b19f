"""Packaging by need: each component's step imports only what its image installs, and a step run without the
extra it needs fails naming that extra.

The images' extras come from their Dockerfiles (``pip install ... '.[a,b]'``), a component's image and the code its
step runs from its compiled ``component.yaml``; every extra's modules not in the image are made unimportable in a
fresh interpreter, which then imports what the step imports. (The sizes of those environments are P8 of
``bench/run.py``; the authoring-only install is ``tests/packaging/test_authoring_install.py``.)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml

from kftrain import images
from kftrain.extras import EXTRA_MODULES
from testbed import REPO_ROOT
from testbed.dockerfiles import package_extras, parse_dockerfile, pip_installs

ROOT = REPO_ROOT
COMPONENT_FILES = sorted((ROOT / "components").glob("*/*/component.yaml"))

# Runs in a fresh interpreter: the listed top-level modules cannot be imported, then the listed modules are.
BLOCKED_IMPORT = textwrap.dedent(
    """
    import importlib, importlib.abc, json, sys
    blocked, wanted = set(json.loads(sys.argv[1])), json.loads(sys.argv[2])

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (not in this image)", name=name)
            return None

    sys.meta_path.insert(0, Blocked())
    for module in wanted:
        importlib.import_module(module)
    print(json.dumps(sorted(m for m in blocked if m in sys.modules)))
    """
)


def expand(extras: list[str]) -> set[str]:
    """The extras ``extras`` stand for, with extras made of other extras (``[horovod]``) expanded."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in out:
            continue
        out.add(extra)
        for requirement in optional[extra]:
            if requirement.startswith("kftrain["):
                todo += requirement[len("kftrain[") : requirement.index("]")].split(",")
    return out


def image_extras(folder: str) -> set[str]:
    """The extras the image built from containers/<folder> installs this checkout with."""
    installs = pip_installs(parse_dockerfile(ROOT / "containers" / folder / "Dockerfile"))
    found = [package_extras(r) for i in installs for r in i.requirements]
    extras = [e for group in found if group is not None for e in group]
    return expand(extras)


def blocked_modules(extras: set[str]) -> set[str]:
    """The modules of every extra the image lacks (those its extras also bring excepted)."""
    present = set().union(*(EXTRA_MODULES[e] for e in extras)) if extras else set()
    return set().union(*EXTRA_MODULES.values()) - present


def import_with_blocked(blocked: set[str], modules: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, json.dumps(sorted(blocked)), json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


def component_step(path: Path) -> tuple[str, list[str]]:
    """(the image folder, the kftrain modules the step's code imports) of a compiled component."""
    spec = yaml.safe_load(path.read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    container = executor["container"]
    by_ref = {ref: folder for folder, _, ref in images.build_matrix()}
    assert container["image"] in by_ref, f"{path}: {container['image']} is not an image of this release"
    program = container["command"][-1]
    modules = [
        node.module
        for node in ast.walk(ast.parse(program))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kftrain"
    ]
    return by_ref[container["image"]], sorted(set(modules))


def test_components_are_found() -> None:
    assert len(COMPONENT_FILES) >= 6, COMPONENT_FILES


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.parent.name)
def test_each_step_imports_only_what_its_image_installs(path: Path) -> None:
    folder, modules = component_step(path)
    assert modules, f"{path}: the step imports nothing from kftrain"
    blocked = blocked_modules(image_extras(folder))
    proc = import_with_blocked(blocked, modules)
    assert proc.returncode == 0, f"{path.parent.name} in python-{folder}:\n{proc.stderr[-3000:]}"
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_the_launch_image_has_no_ml_framework_and_the_launch_step_needs_none() -> None:
    extras = image_extras("launch")
    assert extras == {"s3", "mlflow"}, extras  # mlflow-skinny: MLflow's client, no framework
    blocked = blocked_modules(extras)
    assert {"numpy", "pyarrow", "torch", "tensorflow", "onnxruntime", "sklearn"} <= blocked
    proc = import_with_blocked(blocked, ["kftrain.launch.component", "kftrain.cli", "kftrain.cli.app"])
    assert proc.returncode == 0, proc.stderr[-3000:]


MISSING_EXTRA = textwrap.dedent(
    """
    import sys
    sys.modules.update({name: None for name in sys.argv[1].split(",")})  # None in sys.modules: not installed
    exec(sys.argv[2])
    """
)


# A model folder of the format, published as a trainer publishes it, then loaded for evaluation (the format is
# read from model.json, so the file's content is never looked at before the framework is imported).
SAVED_MODEL = (
    "import tempfile; from kftrain import models, storage; uri = tempfile.mkdtemp() + '/model'\n"
    "with storage.ArtifactWriter(uri) as w:\n"
    "    w.write_json('model.json', {info}); w.write_bytes('{file}', b'weights')\n"
    "models.load_predictor(uri)"
)


@pytest.mark.parametrize(
    ("absent", "code", "message"),
    [
        ("numpy,pyarrow", "import kftrain.steps.prep", "data prep needs the 'numpy' package, which kftrain's [data]"),
        ("pyarrow", "import kftrain.data.dataset", "pip install 'kftrain[data]'"),
        (
            "s3fs",
            "from kftrain import storage; storage.exists('s3://bucket/key')",
            "s3://bucket/key: s3:// needs the s3fs package: pip install 'kftrain[s3]'",
        ),
    ],
)
def test_a_step_without_its_extra_fails_naming_the_extra(absent: str, code: str, message: str) -> None:
    assert_last_error_says(absent, code, message)


# Each model format (model.json's fields, its file), the packages it is loaded without and what the error says.
MODEL_FORMATS = {
    "torch": (
        {"framework": "pytorch", "architecture": "mlp"},
        "model.pt",
        "loading a PyTorch model needs the 'torch' package, which kftrain's [torch] extra installs",
    ),
    "tensorflow,tf_keras": ({"framework": "tensorflow"}, "saved_model.pb", "pip install 'kftrain[tf]'"),
    "onnxruntime": (
        {"format": "onnx"},
        "model.onnx",
        "loading an ONNX model needs the 'onnxruntime' package, which kftrain's [onnx] extra installs",
    ),
    "tensorflow,tf_keras,keras": ({"format": "keras"}, "model.keras", "loading a Keras model needs the"),
}


@pytest.mark.parametrize("absent", list(MODEL_FORMATS))
def test_loading_a_model_without_its_extra_fails_naming_the_extra(absent: str) -> None:
    info, file, message = MODEL_FORMATS[absent]
    assert_last_error_says(absent, SAVED_MODEL.format(info=info, file=file), message)


def assert_last_error_says(absent: str, code: str, message: str) -> None:
    """``code``, run in a Python without the ``absent`` packages, fails and its last line on stderr holds
    ``message``."""
    proc = subprocess.run(
        [sys.executable, "-c", MISSING_EXTRA, absent, code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert message in last, proc.stderr[-2000:]


def test_the_package_is_typed() -> None:
    assert (ROOT / "kftrain" / "py.typed").is_file()
    setup = (ROOT / "setup.py").read_text()
    assert '"py.typed"' in setup

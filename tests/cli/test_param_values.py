"""``--param`` values are checked by one check for ``kftrain run``, ``submit`` and ``schedule create``: each value
refused by one is refused by all, before anything runs or is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from kftrain.cli.app import build_parser
from kftrain.cli.kfp.package import prepare
from kftrain.cli.run import load_for_run
from kftrain.errors import KftrainError

TYPED = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def one(i: int, f: float, s: str, b: bool, items: list, mapping: dict) -> None:
    pass

@dsl.pipeline(name="typed")
def typed(i: int = 1, f: float = 0.5, s: str = "", b: bool = False, items: list = [], mapping: dict = {}) -> None:
    one(i=i, f=f, s=s, b=b, items=items, mapping=mapping)
"""

# (--param NAME=VALUE, what the error says)
REFUSED = {
    "int-text": ("i=abc", "Argument type 'STRING' is incompatible with the input type 'NUMBER_INTEGER'"),
    "int-fraction": ("i=1.5", "Argument type 'NUMBER_DOUBLE' is incompatible with the input type 'NUMBER_INTEGER'"),
    "int-past-int64": (f"i={2**63}", "NUMBER_INTEGER is int64"),
    "int-below-int64": (f"i={-(2**63) - 1}", "NUMBER_INTEGER is int64"),
    "int-bool": ("i=true", "Argument type 'BOOLEAN' is incompatible"),
    "bool-yes": ("b=yes", "Argument type 'STRING' is incompatible with the input type 'BOOLEAN'"),
    "bool-one": ("b=1", "Argument type 'NUMBER_INTEGER' is incompatible with the input type 'BOOLEAN'"),
    "float-infinity": ("f=Infinity", "inf is not a JSON value"),
    "float-minus-infinity": ("f=-Infinity", "-inf is not a JSON value"),
    "float-nan": ("f=NaN", "nan is not a JSON value"),
    "string-number": ("s=5", "Argument type 'NUMBER_INTEGER' is incompatible with the input type 'STRING'"),
    "list-mapping": ('items={"a": 1}', "Argument type 'STRUCT' is incompatible with the input type 'LIST'"),
    "list-with-nan": ("items=[1, NaN]", "nan is not a JSON value"),
    "mapping-list": ("mapping=[1]", "Argument type 'LIST' is incompatible with the input type 'STRUCT'"),
    "mapping-nan": ('mapping={"k": NaN}', "nan is not a JSON value"),
    "mapping-deep-infinity": ('mapping={"k": {"j": [Infinity]}}', "inf is not a JSON value"),
}
ACCEPTED = ["i=3", f"i={2**63 - 1}", "f=0.25", "s=text", 's="5"', "b=false", "items=[1, 2]", 'mapping={"k": [1]}']


def compile_source(folder: Path, name: str, source: str) -> Path:
    """``source`` written to ``folder/<name>.py`` (KFP reads a component's source from its file), imported, and its
    pipeline function ``name`` compiled to ``folder/<name>.yaml``."""
    import importlib.util

    from kfp import compiler

    (folder / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiler.Compiler().compile(getattr(module, name), str(folder / f"{name}.yaml"))
    return folder / f"{name}.yaml"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipeline compiled to a file: ``run`` and ``submit`` both take it."""
    return compile_source(tmp_path_factory.mktemp("typed"), "typed", TYPED)


def _submit_checks(pipeline: Path, param: str, *command: str) -> None:
    args = build_parser().parse_args([*command, str(pipeline), "--param", param, "--host", "http://127.0.0.1:9"])
    with prepare(args):  # every local check; nothing talks to the server
        pass


COMMANDS = {
    "run": lambda pipeline, param: load_for_run(str(pipeline), {**_params(param)}),
    "submit": lambda pipeline, param: _submit_checks(pipeline, param, "submit"),
    "schedule": lambda pipeline, param: _submit_checks(pipeline, param, "schedule", "create", "--interval-seconds=60"),
}


def _params(param: str) -> dict[str, object]:
    from kftrain.cli.params import parse_params

    return parse_params([param])


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_value_of_the_wrong_kind_is_refused_by_every_command(compiled: Path, command: str, case: str) -> None:
    param, message = REFUSED[case]
    with pytest.raises(KftrainError, match=f"--param {param.split('=')[0]}=.*: .*{_escaped(message)}"):
        COMMANDS[command](compiled, param)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("param", ACCEPTED)
def test_a_value_of_its_kind_is_accepted_by_every_command(
    compiled: Path, command: str, param: str, monkeypatch
) -> None:
    monkeypatch.setattr("kftrain.cli.kfp.package.git_sha", lambda where: "abc1234")
    COMMANDS[command](compiled, param)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


REGISTERING = """
from kfp import dsl

@dsl.component(base_image="python:3.11")
def export(register_model: str) -> None:
    pass

@dsl.pipeline(name="registering")
def registering(register_model: str = "") -> None:
    export(register_model=register_model)
"""


@pytest.mark.parametrize("name", ["..hidden", "a/b", "models:/x", " digits"])
def test_a_registry_name_mlflow_refuses_is_refused_before_anything_runs(name: str, tmp_path: Path) -> None:
    """The export step would refuse it only after training; ``run``, ``submit`` and ``schedule`` refuse it first."""
    compile_source(tmp_path, "registering", REGISTERING)
    for command in COMMANDS.values():
        with pytest.raises(KftrainError, match=r"--param register_model=.*a registered model's name"):
            command(tmp_path / "registering.yaml", f"register_model={name}")
    load_for_run(str(tmp_path / "registering.yaml"), {"register_model": "digits"})

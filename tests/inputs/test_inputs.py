"""Each step component's signature is its table's fields, in order, with their defaults; the step parses the
same names, refusing others; the written source has what KFP reads."""

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from kftrain.inputs import REQUIRED, Output, artifact, component_input, function_source, parameters, step_body
from kftrain.inputs.evaluate import EvaluateInputs
from kftrain.inputs.export import ExportInputs
from kftrain.inputs.prep import PrepareInputs
from kftrain.inputs.prep_instructions import PrepareInstructionsInputs


def components() -> list[tuple[Any, type]]:
    from kftrain_components.data.prepare_dataset.component import prepare_dataset
    from kftrain_components.data.prepare_instructions.component import prepare_instructions
    from kftrain_components.evaluation.evaluate_model.component import evaluate_model
    from kftrain_components.export.export_model.component import export_model

    return [
        (evaluate_model, EvaluateInputs),
        (export_model, ExportInputs),
        (prepare_dataset, PrepareInputs),
        (prepare_instructions, PrepareInstructionsInputs),
    ]


@pytest.mark.parametrize(("component", "table"), components(), ids=lambda c: getattr(c, "name", ""))
def test_the_signature_is_the_table(component, table):
    signature = inspect.signature(component.python_func).parameters
    fields = dataclasses.fields(table)
    assert list(signature) == [f.name for f in fields]
    for f in fields:
        wanted = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        if f.default_factory is not dataclasses.MISSING:
            wanted = f.default_factory()
        assert signature[f.name].default == wanted, f.name
    described = component.component_spec.inputs
    assert all(described[f.name].description == f.metadata["doc"] for f in fields if f.name in described)


@pytest.mark.parametrize("table", [EvaluateInputs, ExportInputs, PrepareInputs, PrepareInstructionsInputs])
def test_a_step_refuses_an_input_its_component_does_not_have(table):
    required = {f.name: None for f in dataclasses.fields(table) if f.default is dataclasses.MISSING}
    table(**required)  # the required ones suffice
    with pytest.raises(TypeError, match="html_report_output"):
        table(**required, html_report_output=None)


@dataclass(frozen=True)
class Table:
    given: Any = artifact("dsl.Input[dsl.Model]", "The model.")  # noqa: RUF009 (returns a dataclasses.field)
    name: str = component_input(REQUIRED, "A name.")
    tags: list[str] = component_input(["a"], "Tags.")  # noqa: RUF009
    passed: bool | None = component_input(None, "A verdict.")


def test_the_written_source_has_each_parameter_its_docs_and_the_outputs():
    params = parameters(Table)
    assert [(p.name, p.annotation, p.default) for p in params] == [
        ("given", "dsl.Input[dsl.Model]", REQUIRED),
        ("name", "str", REQUIRED),
        ("tags", "list", ["a"]),
        ("passed", "Optional[bool]", None),
    ]
    assert Table(given=None, name="n").tags is not Table(given=None, name="n").tags  # a fresh list each time
    source = function_source(
        "step", "Do it.", "More.", params, step_body("m:f", params, returns=True), outputs=(Output("ok", bool, "OK."),)
    )
    assert source.startswith(
        "def step(\n    given: dsl.Input[dsl.Model],\n    name: str,\n    tags: list = ['a'],\n"
        '    passed: Optional[bool] = None,\n) -> NamedTuple("Outputs", [("ok", bool)]):\n'
    )
    assert '        tags: Tags.\n        passed: A verdict.\n\n    Returns:\n        ok: OK.\n    """\n' in source
    assert source.endswith(
        "    from m import f\n\n    return f(\n        given=given,\n        name=name,\n"
        "        tags=tags,\n        passed=passed,\n    )\n"
    )
    compile(source, "<test>", "exec")

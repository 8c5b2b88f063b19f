"""Evaluation's classes matched by name (kftrain/steps/evaluate/evaluation.py ``columns_by_name``): a model of classes
[a, b] on a dataset of [b, c] must be a clear error naming both lists, and the same classes in another order are scored
by name.

The models and datasets are tests/steps/evaluate/test_evaluate.py's (``_model_of_one_feature``: a linear model of
one feature whose output columns are named in model.json; ``CLASS_CASES``), taken by name when the case runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed import step_calls
from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "evaluation"
NEEDS = ("torch", "pyarrow")


def _tests() -> Any:
    from tests.steps.evaluate import test_evaluate

    return test_evaluate


def _prepared(sb: Sandbox, labels: tuple[str, ...]) -> str:
    """A dataset of one feature x: rows of x = 0, 1, 2... labelled ``labels`` in turn, 50 each."""
    import numpy as np

    from kftrain.steps.prep import prepare_dataset
    from testbed.bundled import table_source

    x = np.repeat(np.arange(len(labels), dtype=float), 50)[:, None]
    y = np.array(labels)[x[:, 0].astype(int)]
    prepare_dataset(str(sb.work / "ds"), source=table_source(sb.work, "t", x, y, ["x"]), label_column="target")
    return str(sb.work / "ds")


def _scored(
    classes: list[str], weights: list[float], bias: list[float], labels: tuple[str, ...], accuracy: float | None = None
) -> Callable[[Sandbox], None]:
    """``evaluate_model`` of a model of ``classes`` on a dataset of ``labels``: refused, or scored by name (the
    accuracy it must reach)."""

    def run(sb: Sandbox) -> None:
        from kftrain.steps.evaluate import evaluate_model

        dataset = _prepared(sb, labels)
        model = _tests()._model_of_one_feature(sb.work, "m", weights, bias, classes)
        sb.ready()
        result = evaluate_model(model, dataset)
        if accuracy is not None and result.metrics["accuracy"] != accuracy:
            raise Observed(WRONG, f"scored {result.metrics['accuracy']}, not {accuracy}: the columns were misread")

    return run


def _table(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        classes, weights, bias, labels, expected = _tests().CLASS_CASES[key]
        _scored(classes, weights, bias, labels, None if isinstance(expected, str) else expected)(sb)

    return run


def _component(sb: Sandbox) -> None:
    """The evaluation step itself, on [a, b] vs [b, c]: one line, and no report written."""
    dataset = _prepared(sb, ("b", "c"))
    model = _tests()._model_of_one_feature(sb.work, "m", [-10, 10], [5, -5], ["a", "b"])
    sb.ready()
    try:
        step_calls.evaluate(sb.work, dataset, model="m", gate_metric="accuracy")
    finally:
        written = [n for n in ("r.md", "r.html") if (sb.work / n).exists()]
        if written:
            raise Observed(WRONG, f"the refused evaluation wrote {', '.join(written)}")
    del model


CLASS_CASES = {
    "the same classes in another order": FINE,
    "one column for the other positive class": FINE,
    "the same classes in the same order": FINE,
    "other classes": CLEAR,
    "a class named twice": CLEAR,
}
SURFACE = "evaluate_model(model, dataset)"
CASES: list[Case] = [
    *(
        Case(
            AREA,
            f"model classes: {key}",
            expect,
            SURFACE,
            _table(key),
            timeout_s=120,
            needs=NEEDS,
            names=("['a', 'b']", "['b', 'c']") if key == "other classes" else ("'a'",) if expect == CLEAR else (),
        )
        for key, expect in CLASS_CASES.items()
    ),
    Case(
        AREA,
        "model classes [a, b], dataset [b, c], through the step",
        CLEAR,
        "evaluate_component(...)",
        _component,
        names=("['a', 'b']", "['b', 'c']"),
        timeout_s=120,
        needs=NEEDS,
    ),
    Case(
        AREA,
        "model classes [a, b], dataset [a, b, c]",
        CLEAR,
        SURFACE,
        _scored(["a", "b"], [-10, 10], [5, -5], ("a", "b", "c")),
        names=("['a', 'b']", "['a', 'b', 'c']"),
        timeout_s=120,
        needs=NEEDS,
    ),
    Case(
        AREA,
        "model classes [A, B], dataset [a, b] (case differs)",
        CLEAR,
        SURFACE,
        _scored(["A", "B"], [-10, 10], [5, -5], ("a", "b")),
        names=("['A', 'B']", "['a', 'b']"),
        timeout_s=120,
        needs=NEEDS,
    ),
]

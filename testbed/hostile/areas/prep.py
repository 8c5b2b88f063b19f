"""Data prep on odd sources (kftrain/steps/prep): a header line repeated in the middle of a CSV, its natural variants
(at the end, twice, a file of a header only), columns that are not one distinct source column, and files that must
not be read or quoted; nothing is published of a refused source.

Setups from tests/steps/prep/test_prep_hostile_sources.py (``write_csv``, ``COLUMN_CASES``, ``SECRET_CASES``,
``SECRET``), taken by name when the case runs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "prep"
NEEDS = ("pyarrow", "numpy")
SECRET = "TOPSECRET-7d1f"  # test_prep_hostile_sources.SECRET


def _tests() -> Any:
    from tests.steps.prep import test_prep_hostile_sources

    return test_prep_hostile_sources


def _prepared(sb: Sandbox, source: str, features: list[str] | None = None) -> None:
    """``prepare_dataset`` into ``out``: a refusal publishes nothing (no ``out``, no partial folder)."""
    from kftrain.errors import KftrainError
    from kftrain.steps.prep import prepare_dataset

    sb.ready()
    try:
        prepare_dataset(str(sb.work / "out"), source=source, label_column="y", features=features or [])
    except KftrainError:
        left = [p.name for p in sb.work.iterdir() if p.name == "out" or ".partial-" in p.name]
        if left:
            raise Observed(WRONG, f"a refused source published {', '.join(left)}") from None
        raise


def _column_case(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        make, _ = _tests().COLUMN_CASES[key]
        source, features = make(sb.work)
        _prepared(sb, source, features)

    return run


def _secret_case(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        source, _ = _tests().SECRET_CASES[key](sb.work)
        _prepared(sb, source)

    return run


def _csv(edit: Callable[[list[str]], list[str]], glob: bool = False) -> Callable[[Sandbox], None]:
    """The tests' CSV (``x,c,y``, 40 rows) with its lines edited; ``glob``: in a folder, given by ``src/*.csv``."""

    def run(sb: Sandbox) -> None:
        (sb.work / "src").mkdir()
        path = _tests().write_csv(sb.work / "src" / "s.csv")
        lines = edit(path.read_text().splitlines())
        path.write_text("".join(f"{line}\n" for line in lines))
        _prepared(sb, str(sb.work / "src" / "*.csv") if glob else str(path))

    return run


def _text(text: str | bytes, name: str = "s.csv") -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        _prepared(sb, str(sb.write(name, text)))

    return run


def _folder_of_two(sb: Sandbox) -> None:
    """Two CSV files in a folder, each with its own header (the control: the header is each file's first line)."""
    folder = sb.work / "src"
    folder.mkdir()
    _tests().write_csv(folder / "a.csv")
    _tests().write_csv(folder / "b.csv")
    _prepared(sb, str(folder))


def _component(sb: Sandbox) -> None:
    """The prep step itself, on a CSV whose header is repeated: one line."""
    from kftrain.steps.prep.component import prepare_component

    path = _tests().write_csv(sb.work / "s.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:21], lines[0], *lines[21:]]) + "\n")
    dataset = SimpleNamespace(uri=str(sb.work / "out"), metadata={}, path=str(sb.work / "out"))
    sb.ready()
    prepare_component(dataset=dataset, source=str(path), label_column="y")


def _insert(at: int, times: int = 1) -> Callable[[list[str]], list[str]]:
    return lambda lines: [*lines[:at], *[lines[0]] * times, *lines[at:]]


COLUMN_CASES = {
    "a CSV header repeated as a data row": "line 22 repeats the header",
    "a feature given twice": "'x' is given 2 times",
    "the label as a feature": "'y' is the label column",
    "a CSV header naming a column twice": "multiple columns named a",
}
SECRET_CASES = {
    "a link to a file outside the folder": "b.csv",
    "a glob matching a link out of its folder": "b.csv",
    "a row that does not parse": "s.csv",
}
SURFACE = "prepare_dataset(out, source=..., label_column='y')"
CASES: list[Case] = [
    *(
        Case(AREA, key, CLEAR, SURFACE, _column_case(key), names=(said,), needs=NEEDS)
        for key, said in COLUMN_CASES.items()
    ),
    *(
        Case(AREA, key, CLEAR, SURFACE, _secret_case(key), names=(said,), secrets=(SECRET,), needs=NEEDS)
        for key, said in SECRET_CASES.items()
    ),
    Case(
        AREA,
        "a CSV header repeated on its last line",
        CLEAR,
        SURFACE,
        _csv(lambda lines: [*lines, lines[0]]),
        names=("line 42 repeats the header",),
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a CSV header repeated on its second line",
        CLEAR,
        SURFACE,
        _csv(_insert(1)),
        names=("line 2 repeats the header",),
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a CSV header repeated in a file of a glob",
        CLEAR,
        "prepare_dataset(source='src/*.csv')",
        _csv(_insert(5), glob=True),
        names=("s.csv", "repeats the header"),
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a CSV header repeated, through the step",
        CLEAR,
        "prepare_component(...)",
        _component,
        names=("s.csv", "repeats the header"),
        needs=NEEDS,
    ),
    Case(AREA, "a CSV of a header only", CLEAR, SURFACE, _text("x,c,y\n"), names=("s.csv",), needs=NEEDS),
    Case(AREA, "an empty CSV", CLEAR, SURFACE, _text(""), names=("s.csv",), needs=NEEDS),
    Case(AREA, "a CSV without the label column", CLEAR, SURFACE, _text("x,c\n1,a\n2,b\n"), names=("'y'",), needs=NEEDS),
    Case(
        AREA,
        "a CSV that is not UTF-8",
        CLEAR,
        SURFACE,
        _text(b"x,c,y\n1,\xff\xfe,0\n2,a,1\n" * 20),
        names=("s.csv",),
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a CSV with CRLF line ends (control)",
        FINE,
        SURFACE,
        _csv(lambda lines: [line + "\r" for line in lines]),
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a folder of two CSVs, each with its header (control)",
        FINE,
        "prepare_dataset(source='src')",
        _folder_of_two,
        needs=NEEDS,
    ),
    Case(
        AREA,
        "a CSV whose header is repeated with other spacing",
        CLEAR,
        SURFACE,
        _csv(lambda lines: [*lines[:21], "x, c, y", *lines[21:]]),
        names=("s.csv",),
        needs=NEEDS,
    ),
]

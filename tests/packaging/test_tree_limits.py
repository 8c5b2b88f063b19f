"""The tree's limits, each a test that names every offender: product modules (kftrain/, components/, pipelines/) at
most 500 lines, test and testbed modules at most 600, module docstrings of the product at most 15 lines, no test
module importing another (shared helpers live in testbed/), and duplicated code in a bounded number of places.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import REPO_ROOT
from testbed.duplicates import counted, scan, tree_files

PRODUCT_MAX_LINES = 500
TEST_MAX_LINES = 600
DOCSTRING_MAX_LINES = 15
# Pairs of places sharing 6+ lines alike (names, strings and numbers aside) across the whole tree.
DUPLICATE_MAX_PAIRS = 10
DUPLICATE_MIN_LINES = 6
PRODUCT_DIRS = ("kftrain", "components", "pipelines")
TREE_DIRS = (*PRODUCT_DIRS, "testbed", "tests")


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((REPO_ROOT / folder).rglob("*.py"))


def is_test_module(path: Path) -> bool:
    """A module of the tests: anything under tests/, or a test_*.py / conftest.py elsewhere."""
    relative = path.relative_to(REPO_ROOT)
    return relative.parts[0] == "tests" or path.name.startswith("test_") or path.name == "conftest.py"


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def over(paths: Iterator[Path], limit: int) -> list[str]:
    counted = [(line_count(path), rel(path)) for path in paths]
    return [f"{name}: {lines} lines" for lines, name in sorted(counted, reverse=True) if lines > limit]


def test_no_product_module_is_over_500_lines() -> None:
    product = (path for path in python_files(*PRODUCT_DIRS) if not is_test_module(path))
    offenders = over(product, PRODUCT_MAX_LINES)
    assert not offenders, f"{len(offenders)} product modules over {PRODUCT_MAX_LINES} lines:\n" + "\n".join(offenders)


def test_no_test_or_testbed_module_is_over_600_lines() -> None:
    tests = (path for path in python_files(*TREE_DIRS) if is_test_module(path) or rel(path).startswith("testbed/"))
    offenders = over(tests, TEST_MAX_LINES)
    assert not offenders, f"{len(offenders)} test/testbed modules over {TEST_MAX_LINES} lines:\n" + "\n".join(offenders)


def docstring_lines(path: Path) -> int:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def test_every_product_module_docstring_is_at_most_15_lines() -> None:
    counted = [(docstring_lines(path), rel(path)) for path in python_files(*PRODUCT_DIRS)]
    offenders = [
        f"{name}: {lines} lines" for lines, name in sorted(counted, reverse=True) if lines > DOCSTRING_MAX_LINES
    ]
    assert not offenders, f"{len(offenders)} module docstrings over {DOCSTRING_MAX_LINES} lines:\n" + "\n".join(
        offenders
    )


def imported_modules(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of each import; a relative import is given as its dots and name (``..helpers``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.level and not node.module:
                yield from ((node.lineno, base + alias.name) for alias in node.names)
            else:
                yield node.lineno, base


def imports_a_test_module(module: str) -> bool:
    names = module.lstrip(".").split(".")
    return (
        module.startswith(".")
        or names[0] == "tests"
        or any(name.startswith("test_") or name == "conftest" for name in names)
    )


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in python_files(*TREE_DIRS):
        if not is_test_module(path) or path.name == "__init__.py" or path == REPO_ROOT / "conftest.py":
            continue
        for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if imports_a_test_module(module):
                offenders.append(f"{rel(path)}:{line}: imports {module}")
    assert not offenders, (
        f"{len(offenders)} imports of a test module (shared helpers belong in testbed/):\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("tests.launch.test_inputs_validation", True),
        ("..helpers", True),
        ("components.data.prepare_dataset.test_component", True),
        ("testbed.fixtures", False),
        ("kftrain.job.model", False),
    ],
)
def test_what_counts_as_importing_a_test_module(module: str, expected: bool) -> None:
    assert imports_a_test_module(module) is expected


def test_duplicated_code_is_at_most_10_pairs() -> None:
    """testbed/duplicates.py over the whole tree: pairs of places sharing 6+ lines alike, names, strings and numbers
    aside (comments, docstrings, imports and signatures passed over; boilerplate and idioms found in more than eight
    places not counted)."""
    pairs = counted(scan(REPO_ROOT, tree_files(REPO_ROOT), size=DUPLICATE_MIN_LINES))
    listed = "\n".join(map(str, pairs))
    assert len(pairs) <= DUPLICATE_MAX_PAIRS, (
        f"{len(pairs)} pairs of duplicated code (at most {DUPLICATE_MAX_PAIRS}):\n{listed}"
    )

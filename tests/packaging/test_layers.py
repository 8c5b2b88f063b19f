"""kftrain's layering, as the README states it: the imports between its parts (a subpackage or a top-level module)
form no circle, `cli` → `launch` → `backends` → `job` never runs back up, and nothing outside `cli/` imports the
components or pipelines. Every import counts, a function's own included: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from testbed import REPO_ROOT

PACKAGE = REPO_ROOT / "kftrain"
# Top to bottom: a part may import the parts after it, never one before it.
README_CHAIN = ("cli", "launch", "backends", "job")
SHIPPED = ("kftrain_components", "kftrain_pipelines")


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = REPO_ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or ""


def part(module: str) -> str | None:
    """The part of kftrain ``module`` belongs to (``kftrain.job.kinds.base`` → ``job``); None outside kftrain."""
    names = module.split(".")
    return names[1] if names[0] == "kftrain" and len(names) > 1 else None


def edges() -> dict[tuple[str, str], str]:
    """(importer's part, imported part) → the first place it happens (``path:line``)."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        here = part(module_name(path))
        for line, module in imports(path):
            there = part(module)
            if here and there and here != there:
                found.setdefault((here, there), f"{path.relative_to(REPO_ROOT)}:{line}")
    return found


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one member (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_parts_of_kftrain_import_each_other_in_no_circle() -> None:
    found = edges()
    graph: dict[str, set[str]] = {}
    for here, there in found:
        graph.setdefault(here, set()).add(there)
    offenders = [
        f"{' ↔ '.join(members)}: "
        + "; ".join(f"{a} → {b} at {found[a, b]}" for a in members for b in members if (a, b) in found)
        for members in circles(graph)
    ]
    assert not offenders, "kftrain's parts import each other in a circle:\n" + "\n".join(offenders)


def test_the_readme_chain_never_runs_back_up() -> None:
    found = edges()
    offenders = [
        f"{lower} → {upper} at {found[lower, upper]}"
        for i, upper in enumerate(README_CHAIN)
        for lower in README_CHAIN[i + 1 :]
        if (lower, upper) in found
    ]
    assert not offenders, "imports against cli → launch → backends → job:\n" + "\n".join(offenders)


def test_only_the_cli_imports_the_shipped_components_and_pipelines() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line}: imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if part(module_name(path)) != "cli"
        for line, module in imports(path)
        if module.split(".")[0] in SHIPPED
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
    ids=["chain", "pair", "triangle-with-a-tail"],
)
def test_circles_are_found(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert circles(graph) == expected


def test_a_relative_import_is_resolved(tmp_path: Path) -> None:
    module = tmp_path / "kftrain" / "job" / "kinds" / "base.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..pod_settings import X\nfrom . import registry\nimport kftrain.cli\n")
    assert [m for _, m in imports(module, tmp_path)] == ["kftrain.job.pod_settings", "kftrain.job.kinds", "kftrain.cli"]

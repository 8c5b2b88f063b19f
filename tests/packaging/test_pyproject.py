"""pyproject.toml's extras: each requirement pinned by constraints.txt within its range, and each command the docs
tell a reader to run installed by one of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# A command the docs show (`tensorboard --logdir ...`) -> the distribution that installs it.
DOCUMENTED_TOOLS = {"tensorboard": "tensorboard"}


def extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in project["optional-dependencies"].items()}


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[canonicalize_name(name)] = version.strip()
    return found


def test_every_requirement_of_every_extra_is_pinned_within_its_range() -> None:
    pinned = pins()
    wrong = [
        f"[{extra}] {req}: pinned {pinned.get(canonicalize_name(req.name), 'nowhere')}"
        for extra, reqs in extras().items()
        for req in reqs
        if canonicalize_name(req.name) != "kftrain"
        and not req.specifier.contains(pinned.get(canonicalize_name(req.name), "0.0.0.dev0"), prereleases=True)
    ]
    assert wrong == []


def test_every_tool_the_docs_run_is_installed_by_an_extra() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    shown = {tool for doc in docs for tool in DOCUMENTED_TOOLS if re.search(rf"`{tool} ", doc.read_text())}
    assert shown == set(DOCUMENTED_TOOLS)  # the docs still show each (else this table is stale)
    installed = {canonicalize_name(req.name) for reqs in extras().values() for req in reqs}
    assert {tool for tool in shown if DOCUMENTED_TOOLS[tool] not in installed} == set()

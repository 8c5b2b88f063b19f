"""Every path of this checkout that README.md and docs/*.md name exists.

A path is a word that starts with one of the checkout's top-level folders and a slash (``kftrain/job/model.py``,
``tests/controlplane/``), in prose, code spans, fenced blocks or link targets. A placeholder stands for any name:
``<kind>`` and ``NAME`` as a glob's ``*``, ``{a,b}`` as each of its names; a path with one must match something.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# The folders of the checkout a page may name; generated ones (runs/, build/, *.egg-info) are not the tree's.
TOP_FOLDERS = sorted(
    path.name
    for path in REPO_ROOT.iterdir()
    if path.is_dir() and path.name[0] not in "._" and path.name not in {"build", "dist", "runs"}
    if not path.name.endswith(".egg-info")
)
PATH = re.compile(r"(?<![\w./~$@:-])(?:" + "|".join(map(re.escape, TOP_FOLDERS)) + r")/[^\s`'\"()\[\]|,;]*")
PLACEHOLDER = re.compile(r"<[^<>/]*>|\b[A-Z][A-Z_]{2,}\b|\.\.\.|…")
BRACES = re.compile(r"\{([^{}/]*,[^{}/]*)\}")


def named_paths(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, path) of each path of the checkout the page names."""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for word in re.split(r"\s+|`", line):
            if "://" in word:
                continue  # a URL: another site's path
            for found in PATH.findall(word):
                path = re.sub(r":\d.*$", "", found).rstrip(".:")  # path:line citations, sentence ends
                if path:
                    yield number, path


def expansions(path: str) -> list[str]:
    """The globs a path stands for: each brace alternative, placeholders as ``*``."""
    parts = BRACES.split(path)
    choices = [[part] if index % 2 == 0 else part.split(",") for index, part in enumerate(parts)]
    return [PLACEHOLDER.sub("*", "".join(chosen)) for chosen in itertools.product(*choices)]


def exists(pattern: str) -> bool:
    if "*" not in pattern:
        return (REPO_ROOT / pattern).exists()
    return any(REPO_ROOT.glob(pattern.rstrip("/")))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = [
        f"line {number}: {path}"
        for number, path in named_paths(page)
        if not all(exists(pattern) for pattern in expansions(path))
    ]
    assert not missing, f"{page.relative_to(REPO_ROOT)} names {len(missing)} paths that do not exist:\n" + "\n".join(
        missing
    )


@pytest.mark.parametrize(
    ("path", "globs"),
    [
        ("tests/job/kinds/<kind>/", ["tests/job/kinds/*/"]),
        ("kftrain/launch/{inputs,step}.py", ["kftrain/launch/inputs.py", "kftrain/launch/step.py"]),
        ("testbed/controlplane/operators/NAME", ["testbed/controlplane/operators/*"]),
    ],
)
def test_placeholders_stand_for_any_name(path: str, globs: list[str]) -> None:
    assert expansions(path) == globs


def test_a_stale_path_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("The pipelines are `pipelines/<name>/pipeline.py`; see https://example.com/kftrain/x.\n")
    assert list(named_paths(page)) == [(1, "pipelines/<name>/pipeline.py")]
    assert not exists(expansions("pipelines/<name>/pipeline.py")[0])

"""The documentation holds what it shows: README.md and docs/ are checked as a newcomer would use them.

- every relative link (and its ``#anchor``) resolves to a file (and a heading) of this checkout;
- every ``kftrain`` command line in a shell block is one the real command accepts: its subcommand exists and each
  ``--option`` it gives is one of that subcommand's (a line without placeholders is parsed whole by the parser);
- every ``make`` target a shell block names is a target of the Makefile;
- every Python block compiles;
- the README's own-pipeline module is examples/own_pipeline/my_pipeline.py, which tests/pipelines/test_own_pipeline.py
  runs, compiles and submits with the README's own command lines;
- the README is short enough to read in minutes (at most 250 lines), and every docs page is linked from it.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from kftrain.cli.app import build_parser
from testbed import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 250
# A paragraph or a list item of a page, in lines: short enough to scan (a table row or a code block is neither).
PARAGRAPH_MAX_LINES = 12
ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")

FENCE = re.compile(r"^```(\w*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # links and images


def blocks(path: Path) -> Iterator[tuple[str, int, str]]:
    """(language, first line number, text) of each fenced block of a Markdown file."""
    language, start, body = None, 0, []  # type: tuple[str | None, int, list[str]]
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, body = fence.group(1), number + 1, []
        elif line.startswith("```") and language is not None:
            yield language, start, "\n".join(body)
            language = None
        elif language is not None:
            body.append(line)


def prose(path: Path) -> str:
    """The Markdown outside its fenced blocks (links in code are examples, not links)."""
    kept, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path).splitlines() if line.startswith("#")}


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists() or REPO_ROOT.resolve() not in (resolved, *resolved.parents):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {page_id(resolved)}")
    assert not broken, f"{page_id(page)}: " + "; ".join(broken)


def shell_lines(page: Path) -> Iterator[tuple[int, str]]:
    """Each command of the page's shell blocks, continuation lines joined, comments dropped."""
    for language, start, text in blocks(page):
        if language not in ("bash", "sh", "shell"):
            continue
        pending, first = "", start
        for number, line in enumerate(text.splitlines(), start):
            code = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
            if not pending:
                first = number
            if code.endswith("\\"):
                pending += code[:-1] + " "
                continue
            command = (pending + code).strip()
            pending = ""
            if command:
                yield first, command


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def check_kftrain(words: list[str]) -> str | None:
    """Why ``kftrain WORDS`` is not a command the real parser takes (None: it is)."""
    parser, path = build_parser(), ["kftrain"]
    rest = list(words)
    while rest and subcommands(parser) and not rest[0].startswith("-"):
        choices = subcommands(parser)
        if rest[0] not in choices:
            if rest[0].isupper() or rest[0].startswith("["):
                break  # a placeholder (kftrain COMMAND) rather than a subcommand
            return f"{' '.join(path)} has no subcommand {rest[0]!r} (it has {', '.join(sorted(choices))})"
        path.append(rest.pop(0))
        parser = choices[path[-1]]
    known = options(parser)
    for word in rest:
        flag = word.strip("[]").split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            return f"{' '.join(path)} takes no option {flag}"
    synopsis = any(ch in " ".join(words) for ch in "[]|…") or "..." in words
    if not synopsis:
        try:
            build_parser().parse_args(words)
        except SystemExit:
            return f"kftrain {' '.join(words)}: refused by the parser"
    return None


MAKE_TARGET = re.compile(r"^([a-zA-Z][\w-]*):", re.MULTILINE)


def make_targets() -> set[str]:
    return set(MAKE_TARGET.findall((REPO_ROOT / "Makefile").read_text()))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_line_is_one_the_tools_take(page: Path) -> None:
    wrong, targets = [], make_targets()
    for number, command in shell_lines(page):
        try:
            words = shlex.split(command)
        except ValueError as exc:
            wrong.append(f"line {number}: {exc}")
            continue
        while (words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])) or words[:1] == ["export"]:
            words.pop(0)  # VAR=value prefixes and `export VAR=...` lines
        if words[:1] == ["kftrain"]:
            why = check_kftrain(words[1:])
            if why:
                wrong.append(f"line {number}: {why}")
        elif words[:1] == ["make"]:
            wrong += [f"line {number}: no make target {w!r}" for w in words[1:] if "=" not in w and w not in targets]
    assert not wrong, f"{page_id(page)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_python_block_compiles(page: Path) -> None:
    for language, start, text in blocks(page):
        if language == "python":
            try:
                ast.parse(text)
            except SyntaxError as exc:
                pytest.fail(f"{page_id(page)} line {start + (exc.lineno or 1) - 1}: {exc.msg}")


def test_the_readmes_own_pipeline_is_the_example_the_tests_run() -> None:
    """The module the README shows is examples/own_pipeline/my_pipeline.py (less its docstring), so the test that
    runs, compiles and submits that file runs the README's example."""
    shown = [text for language, _, text in blocks(README) if language == "python" and "@dsl.pipeline" in text]
    assert len(shown) == 1, "the README shows one pipeline module"
    module = (REPO_ROOT / "examples" / "own_pipeline" / "my_pipeline.py").read_text()
    body = ast.get_source_segment(module, ast.parse(module).body[1]) or ""
    code = module[module.index(body) :].strip()
    assert shown[0].strip() == "# examples/own_pipeline/my_pipeline.py\n" + code


def test_the_readme_is_short_and_links_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines"
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in LINK.findall(prose(README))}
    missing = [page_id(page) for page in DOCS if page.resolve() not in linked]
    assert not missing, f"README.md links none of {missing}"


def long_paragraphs(text: str) -> list[str]:
    """``line N: K lines`` for each paragraph or list item of ``text`` (a Markdown page) over the limit."""
    found, run, start, fenced = [], 0, 1, False
    for number, line in enumerate([*text.splitlines(), ""], 1):
        fenced = fenced != line.startswith("```")
        if fenced or line.startswith("```") or not line.strip() or line.startswith(("|", "#")) or ITEM.match(line):
            if run > PARAGRAPH_MAX_LINES:
                found.append(f"line {start}: {run} lines")
            run, start = (1, number) if ITEM.match(line) else (0, number + 1)
        else:
            run += 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_paragraph_or_list_item_is_over_12_lines(page: Path) -> None:
    found = long_paragraphs(page.read_text(encoding="utf-8"))
    assert not found, f"{page_id(page)}: paragraphs over {PARAGRAPH_MAX_LINES} lines: {found}"


def test_what_counts_as_a_long_paragraph() -> None:
    prose_lines = "\n".join(["text"] * 13)
    assert long_paragraphs(prose_lines) == ["line 1: 13 lines"]
    assert long_paragraphs("\n".join(["text"] * 12)) == []
    assert long_paragraphs("\n".join(["- item"] + ["  more"] * 11 + ["- next"])) == []
    assert long_paragraphs("\n".join(["- item"] + ["  more"] * 12)) == ["line 1: 13 lines"]
    assert long_paragraphs("\n".join(["```", *["code"] * 20, "```", "text"])) == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """Each check refuses its mistake: a subcommand and an option that do not exist, a broken link and anchor."""
    assert check_kftrain(["compile", "my_pipeline:my_pipeline", "-o", "x.yaml"]) is None
    assert "no subcommand 'deploy'" in (check_kftrain(["deploy", "x"]) or "")
    assert "takes no option --nope" in (check_kftrain(["run", "pytorch-digits", "--nope"]) or "")
    assert "refused by the parser" in (check_kftrain(["jobs", "logs"]) or "")
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](#nothing)\n")
    assert anchors(page) == {"title"}

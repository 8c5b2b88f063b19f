"""The duplicated-code scanner (testbed/duplicates.py) on small sources: what it passes over, what counts as alike,
how runs merge and pairs count, what is boilerplate, and that the whole tree is scanned in a few seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed import REPO_ROOT
from testbed.duplicates import counted, find_pairs, kept_lines, scan, tree_files

BODY = """
total = compute(alpha, beta) + 1
if total > limit:
    raise ValueError("too many: " + str(total))
values.append(total * scale)
report = render(values, title="sum")
print(report.strip(), file=sys.stderr)
"""


def renamed(body: str) -> str:
    """The same code with other names, strings and numbers."""
    for old, new in (("total", "count"), ("compute", "measure"), ("alpha", "x"), ("1", "7"), ('"sum"', '"other"')):
        body = body.replace(old, new)
    return body


def pairs_of(**sources: str) -> list[str]:
    return [str(pair) for pair in counted(find_pairs({name: kept_lines(text) for name, text in sources.items()}))]


def test_identical_lines_in_two_files_are_one_pair() -> None:
    assert pairs_of(a=BODY, b="x = 1\n" + BODY) == ["a:2-7 ~ b:3-8"]


def test_lines_alike_but_for_names_strings_and_numbers_are_a_shape_pair() -> None:
    assert pairs_of(a=BODY, b=renamed(BODY)) == ["a:2-7 ~ b:2-7 shape"]


def test_five_lines_alike_are_no_pair() -> None:
    five = "\n".join(BODY.strip().splitlines()[:5]) + "\n"
    assert pairs_of(a=five, b=five) == []


def test_a_different_operator_or_keyword_breaks_the_shape() -> None:
    assert pairs_of(a=BODY, b=BODY.replace("total * scale", "total - scale")) == []


def test_comments_docstrings_blank_lines_imports_and_signatures_are_passed_over() -> None:
    noisy = '"""Module docstring."""\nimport os\nfrom sys import (\n    argv,\n    path,\n)\n\n'
    lines = BODY.strip().splitlines()
    noisy += "\n".join(f"{line}  # note\n" for line in lines[:3]) + '\n"""A string statement."""\n'
    noisy += "@decorated\ndef f(\n    a: int,\n) -> None:\n    ...\n" + "\n".join(lines[3:]) + "\n"
    assert pairs_of(a=BODY, b=noisy) == ["a:2-7 ~ b:8-22"]


def test_kept_lines_drop_punctuation_alone_and_keep_their_numbers() -> None:
    lines = kept_lines('"""Doc."""\nimport os\n\nvalue = call(\n    first,\n    second,\n)\n')
    assert [(line.number, line.shape) for line in lines] == [(4, "N = N ("), (5, "N ,"), (6, "N ,")]


def test_overlapping_windows_merge_into_one_run_and_two_files_are_one_pair() -> None:
    longer = BODY + "result = finish(report)\nsend(result, to=target)\n"
    other = "\n".join(f"unrelated_{i} = {i}" for i in range(3)) + "\n" + longer + "\nwhile True:\n    x += 1\n"
    assert pairs_of(a=longer, b=other) == ["a:2-9 ~ b:5-12"]


def test_a_run_in_three_places_is_three_pairs() -> None:
    assert len(pairs_of(a=BODY, b=BODY, c=renamed(BODY))) == 3


def test_a_run_in_more_than_eight_places_is_left_out() -> None:
    nine = {f"f{i}": BODY for i in range(9)}
    assert pairs_of(**nine) == []
    eight = {f"f{i}": BODY for i in range(8)}
    assert len(pairs_of(**eight)) == 8 * 7 // 2


def test_a_run_repeated_within_one_file_is_a_pair_with_itself() -> None:
    assert pairs_of(a=BODY + "\nother = 2\n" + renamed(BODY)) == ["a:2-7 ~ a:11-16 shape"]


def test_thin_lines_are_boilerplate_not_counted() -> None:
    thin = "result = make(\n" + "".join(f"    {name}={name},\n" for name in "abcdefgh") + ")\n"
    assert pairs_of(a=thin, b=renamed(thin).replace("make", "build")) == []
    found = find_pairs({"a": kept_lines(thin), "b": kept_lines(thin.replace("make", "build"))})
    assert [pair.boilerplate for pair in found] == [True]


def test_a_table_of_one_shape_is_boilerplate() -> None:
    table = (
        "SIZES = {\n" + "".join(f'    "{name}": {i} * unit + offset,\n' for i, name in enumerate("abcdefgh")) + "}\n"
    )
    assert pairs_of(a=table, b=table.replace("SIZES", "OTHER")) == []


def test_a_table_after_two_lines_of_code_is_still_a_table() -> None:
    """Six lines of three shapes (a return, a dict's head, four rows alike): half distinct is a table."""
    rows = "".join(f'    "{name}": (handler_{name}, "what it says"),\n' for name in "abcd")
    table = "    return run\n\n\nCASES = {\n" + rows + "}\n"
    assert pairs_of(a="def f():\n" + table, b="def g():\n" + table.replace("CASES", "OTHER")) == []
    found = find_pairs({"a": kept_lines("def f():\n" + table), "b": kept_lines("def g():\n" + table)})
    assert [pair.boilerplate for pair in found] == [True]


def test_scan_names_files_relative_to_the_root(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "one.py").write_text(BODY)
    (tmp_path / "two.py").write_text(renamed(BODY))
    found = scan(tmp_path, [tmp_path / "pkg" / "one.py", tmp_path / "two.py"])
    assert [str(pair) for pair in found] == ["pkg/one.py:2-7 ~ two.py:2-7 shape"]


def test_a_file_tokenize_cannot_read_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("x = (1,\n")
    with pytest.raises(ValueError, match=r"broken\.py: not Python that tokenize reads"):
        scan(tmp_path, [tmp_path / "broken.py"])


def test_the_whole_tree_is_scanned_in_a_few_seconds_of_cpu() -> None:
    files = tree_files(REPO_ROOT)
    assert len(files) > 500
    started = time.process_time()
    scan(REPO_ROOT, files)
    assert time.process_time() - started < 5

"""The synthetic instruction tasks: seeded, distinct prompts, correct answers, written as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.llm import synthetic


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    assert synthetic.rows("reverse", 200, seed=1) == synthetic.rows("reverse", 200, seed=1)
    assert synthetic.rows("reverse", 200, seed=1) != synthetic.rows("reverse", 200, seed=2)


@pytest.mark.parametrize("name", sorted(synthetic.BUILTIN))
def test_prompts_are_distinct_and_answers_right(name: str) -> None:
    rows = synthetic.rows(name, 500, seed=0)
    assert len({r["prompt"] for r in rows}) == 500
    answer = {"reverse": lambda w: w[::-1], "upper": str.upper, "sort": lambda w: "".join(sorted(w))}[name]
    for row in rows:
        word = row["prompt"].split(": ", 1)[1]
        assert 3 <= len(word) <= 7 and word.isalpha() and word.islower()
        assert row["response"] == answer(word)


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(synthetic.UnknownTask, match=r"builtin:nope: .*known: reverse, sort, upper"):
        synthetic.rows("nope", 10)


def test_zero_rows_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        synthetic.rows("reverse", 0)


def test_write_task_writes_json_lines(tmp_path: Path) -> None:
    uri = synthetic.write_task(str(tmp_path / "src"), "reverse", 30, seed=5)
    assert uri == str(tmp_path / "src" / "reverse.jsonl")
    lines = Path(uri).read_text().splitlines()
    assert [json.loads(line) for line in lines] == synthetic.rows("reverse", 30, seed=5)


def test_write_task_to_an_s3_prefix(s3_env: str) -> None:
    uri = synthetic.write_task(storage.join(s3_env, "src"), "upper", 20, seed=0)
    rows = [json.loads(line) for line in storage.read_bytes(uri).decode().splitlines()]
    assert rows == synthetic.rows("upper", 20, seed=0)

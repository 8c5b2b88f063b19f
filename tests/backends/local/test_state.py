"""A job record is read as untrusted: one that JSON's parser would take but nothing can use (a non-finite number,
nesting deep enough to exhaust the stack) is that record's line, ``Unreadable``, and every other job is listed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kftrain.backends.local.state import MAX_RECORD_DEPTH, STATE_DIR_ENV
from kftrain.cli.app import main

GOOD = {"name": "good-job", "kind": "PyTorchJob", "phase": "Succeeded", "replicas": ["master-0"]}

# The record's text after ``{"name": "bad-job", ``; what its line says.
HOSTILE = {
    "minus infinity": ('"created": -Infinity}', "not JSON: a non-finite number (-Infinity)"),
    "nan": ('"created": NaN}', "not JSON: a non-finite number (NaN)"),
    "overflowing float": ('"created": 1e999}', "not JSON: a non-finite number (1e999)"),
    "100,000 nested lists": ('"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "not JSON"),
    "nested past the bound": ('"x": ' + "[" * MAX_RECORD_DEPTH + "]" * MAX_RECORD_DEPTH + "}", "nested deeper"),
    "nested objects": ('"x": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}", "not JSON"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_record_is_one_unreadable_line_and_the_others_are_listed(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    (tmp_path / "good-job.json").write_text(json.dumps({**GOOD, "created": time.time()}))
    text, says = HOSTILE[case]
    (tmp_path / "bad-job.json").write_text('{"name": "bad-job", ' + text)
    assert main(["jobs", "list"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and not err, err
    assert "good-job" in out and "Succeeded" in out, out
    (bad,) = [line for line in out.splitlines() if "bad-job" in line]
    assert "Unreadable" in bad, out
    assert main(["jobs", "status", "bad-job"]) in (0, 2)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and f"bad-job.json: {says}" in out + err, out + err


def test_a_record_as_deep_as_the_bound_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    depth = MAX_RECORD_DEPTH - 1  # the record itself is one level
    nested = json.loads("[" * depth + "]" * depth)
    (tmp_path / "good-job.json").write_text(json.dumps({**GOOD, "created": time.time(), "x": nested}))
    assert main(["jobs", "list"]) == 0
    out = capsys.readouterr().out
    assert "good-job" in out and "Succeeded" in out and "Unreadable" not in out, out
